// The local cluster's DNS server: CoreDNS with only the plugins its Corefile uses, so the
// build pulls in no cloud SDKs. The Corefile is written by cluster/dns.ts.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
