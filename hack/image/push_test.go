package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// An archive pushed to a registry (an in-memory one on loopback) is there
// under the tag, with the same digest.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(archive, name.MustParseReference("example.com/x:archived"), img); err != nil {
		t.Fatal(err)
	}
	to := strings.TrimPrefix(srv.URL, "http://") + "/team/watchcache-exporter:v0.1.0"
	if err := run([]string{"push", "-archive", archive, "-to", to}); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(to)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if d, err := got.Digest(); err != nil || d != want {
		t.Errorf("pushed image's digest %v (%v), want %v", d, err, want)
	}
}

// Bad arguments are refused, naming the flag.
func TestPushRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "-to", "r.example.com/x:y"}, "-archive and -to are required"},
		{[]string{"push", "-archive", "a.tar", "-to", "UPPER/x:y"}, "-to"},
		{[]string{"push", "-archive", filepath.Join(t.TempDir(), "none.tar"), "-to", "r.example.com/x:y"}, "-archive"},
	} {
		if err := run(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
