package main

import (
	"flag"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// push copies the image of an archive that run wrote to a registry, with
// the credentials of the Docker config (~/.docker/config.json, $DOCKER_CONFIG)
// or none: no container engine needed.
//
//	image push -archive bin/watchcache-exporter-image.tar -to registry.example.com/team/watchcache-exporter:v0.1.0
func push(args []string) error {
	fs := flag.NewFlagSet("image push", flag.ContinueOnError)
	archive := fs.String("archive", "", "archive written by image")
	to := fs.String("to", "", "image reference to push to, registry/repository:tag")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *archive == "" || *to == "" {
		return fmt.Errorf("-archive and -to are required")
	}
	ref, err := name.NewTag(*to)
	if err != nil {
		return fmt.Errorf("-to: %w", err)
	}
	img, err := tarball.ImageFromPath(*archive, nil)
	if err != nil {
		return fmt.Errorf("-archive: %w", err)
	}
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", ref, d)
	return nil
}
