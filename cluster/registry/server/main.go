// kfn-registry is CNCF Distribution's registry command with only what the local cluster uses:
// filesystem and in-memory storage and htpasswd auth. The upstream command also links the S3,
// Azure and GCS storage drivers, the CloudFront middleware, token auth and the pull-through
// proxy, which double its build for nothing a local registry needs.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
