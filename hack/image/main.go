// Command image builds an OCI image from one static binary, without a
// container engine: one layer that holds the binary (and, with -dir, a
// folder's tree beside it), and a config with the user, entrypoint, ports
// and labels given. It writes a docker-save style
// archive that `ctr images import`, `kind load image-archive`, `podman load`
// and `docker load` all accept.
//
//	image -binary bin/watchcache-exporter -path /watchcache-exporter \
//	  -tag ghcr.io/watchcache/watchcache-exporter:dev -user 65532:65532 \
//	  -port 9890/tcp -label org.opencontainers.image.title=... -o out.tar
//
// `image push` copies such an archive's image to a registry (push.go).
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "push" {
		return push(args[1:])
	}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fs.String("binary", "", "static binary to put in the image")
	path := fs.String("path", "", "its path in the image, also the entrypoint")
	tag := fs.String("tag", "", "image reference written into the archive")
	user := fs.String("user", "65532:65532", "uid:gid the entrypoint runs as")
	out := fs.String("o", "", "archive to write")
	dir := fs.String("dir", "", "a folder whose tree goes into the layer too (files, folders and symbolic links, owned by root)")
	var ports, labels list
	fs.Var(&ports, "port", "exposed port, e.g. 9890/tcp (repeatable)")
	fs.Var(&labels, "label", "key=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for f, v := range map[string]string{"-binary": *binary, "-path": *path, "-tag": *tag, "-o": *out} {
		if v == "" {
			return fmt.Errorf("%s is required", f)
		}
	}
	if !strings.HasPrefix(*path, "/") {
		return fmt.Errorf("-path %q: must be absolute", *path)
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	if err := checkStatic(*binary); err != nil {
		return err
	}
	cfg := v1.Config{
		User:         *user,
		Entrypoint:   []string{*path},
		ExposedPorts: map[string]struct{}{},
		Labels:       map[string]string{},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	for _, p := range ports {
		if !strings.Contains(p, "/") {
			p += "/tcp"
		}
		cfg.ExposedPorts[p] = struct{}{}
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("-label %q: want key=value", l)
		}
		cfg.Labels[k] = v
	}
	content, err := layerTar(*path, bin, *dir)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(content)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config = cfg
	// A fixed time keeps the image ID the same for the same binary.
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, *out)
}

// layerTar holds the tree of dir, if any, then the binary and the folders
// above it, owned by root, with a fixed time so that the layer digest
// depends on the content alone.
func layerTar(path string, bin []byte, dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	seen := map[string]bool{}
	if dir != "" {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == dir {
				return err
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: mtime}
			switch {
			case d.IsDir():
				h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
				seen[rel] = true
			case d.Type()&fs.ModeSymlink != 0:
				if h.Linkname, err = os.Readlink(p); err != nil {
					return err
				}
				h.Typeflag, h.Mode = tar.TypeSymlink, 0o777
			case d.Type().IsRegular():
				h.Typeflag, h.Size = tar.TypeReg, info.Size()
			default:
				return fmt.Errorf("-dir: %s is neither a file, a folder nor a symbolic link", p)
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if h.Typeflag == tar.TypeReg {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				_, err = tw.Write(b)
				return err
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 1; i < len(parts); i++ {
		if d := strings.Join(parts[:i], "/"); !seen[d] {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime})
		}
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.Join(parts, "/"), Mode: 0o755, Size: int64(len(bin)), ModTime: mtime})
	tw.Write(bin)
	return buf.Bytes(), tw.Close()
}

// checkStatic refuses a dynamically linked binary: the image has no libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: not an ELF binary: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New(path + " is dynamically linked; build it with CGO_ENABLED=0")
		}
	}
	return nil
}
