package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The layer holds -dir's tree (files with their modes, folders, symbolic
// links as links) and the binary at its path, each folder once.
func TestLayerTarWithDir(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"usr/sbin", "usr/lib/x"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/sbin/tool"), []byte("tool"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tool", filepath.Join(dir, "usr/sbin/alias")); err != nil {
		t.Fatal(err)
	}
	b, err := layerTar("/usr/local/bin/main", []byte("main"), dir)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name string
		typ  byte
		mode int64
		link string
		body string
	}
	var got []entry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, entry{h.Name, h.Typeflag, h.Mode, h.Linkname, string(body)})
	}
	want := []entry{
		{"usr/", tar.TypeDir, 0o755, "", ""},
		{"usr/lib/", tar.TypeDir, 0o755, "", ""},
		{"usr/lib/x/", tar.TypeDir, 0o755, "", ""},
		{"usr/sbin/", tar.TypeDir, 0o755, "", ""},
		{"usr/sbin/alias", tar.TypeSymlink, 0o777, "tool", ""},
		{"usr/sbin/tool", tar.TypeReg, 0o750, "", "tool"},
		{"usr/local/", tar.TypeDir, 0o755, "", ""},
		{"usr/local/bin/", tar.TypeDir, 0o755, "", ""},
		{"usr/local/bin/main", tar.TypeReg, 0o755, "", "main"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("layer:\n%v\nwant\n%v", got, want)
	}
}
