// kfn-image writes a container image as a tarball that `ctr images import` reads, from layer
// tarballs made by the caller and an image config, using go-containerregistry for the
// manifest, config and archive layout.
//
// Usage: kfn-image SPEC.json, where SPEC is
//
//	{"name": "kfn.local/node:24", "out": "image.tar", "layers": ["a.tar", ...],
//	 "config": {"Entrypoint": [...], "User": "65532", "Env": [...], "WorkingDir": "/"}}
//
// and config takes the field names of the OCI image config. It prints the image's config
// digest (the image ID containerd shows).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type spec struct {
	Name   string    `json:"name"`
	Out    string    `json:"out"`
	Layers []string  `json:"layers"`
	Config v1.Config `json:"config"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kfn-image SPEC.json")
		os.Exit(2)
	}
	id, err := build(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfn-image: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(id)
}

func build(specFile string) (string, error) {
	raw, err := os.ReadFile(specFile)
	if err != nil {
		return "", err
	}
	var s spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s: %w", specFile, err)
	}
	tag, err := name.NewTag(s.Name)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", s.Name, err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, path := range s.Layers {
		layer, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return "", fmt.Errorf("layer %s: %w", path, err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return "", fmt.Errorf("layer %s: %w", path, err)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Config = "linux", "amd64", s.Config
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	if err := tarball.WriteToFile(s.Out, tag, img); err != nil {
		return "", fmt.Errorf("writing %s: %w", s.Out, err)
	}
	digest, err := img.ConfigName()
	if err != nil {
		return "", err
	}
	return digest.String(), nil
}
