package e2e_test

import (
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/watchcache/watchcache-exporter/test/e2e"
)

// TestOverlayImageTag renders the overlay the node test applies with tags
// `git describe` can give, a short hash of digits only among them.
func TestOverlayImageTag(t *testing.T) {
	for _, tag := range []string{"3438140", "1e5", "v0.1.0-3-gabc1234-dirty", "latest"} {
		t.Run(tag, func(t *testing.T) {
			rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), e2e.Overlay(t, tag))
			if err != nil {
				t.Fatal(err)
			}
			var images []string
			for _, r := range rm.Resources() {
				if r.GetKind() != "Deployment" {
					continue
				}
				cs, err := r.GetSlice("spec.template.spec.containers")
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range cs {
					images = append(images, c.(map[string]any)["image"].(string))
				}
			}
			want := "ghcr.io/watchcache/watchcache-exporter:" + tag
			if len(images) != 1 || images[0] != want {
				t.Errorf("images %q, want [%s]", images, want)
			}
		})
	}
}
