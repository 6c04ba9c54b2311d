package testnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cgroupPrefix names the node's cgroup parents, one per run: the prefix, the
// PID of the test process that made it, a dash and a random suffix.
const cgroupPrefix = "watchcache-testnode-"

// cgroupRootName is the name of a new node cgroup parent of this process.
func cgroupRootName(suffix string) string {
	return cgroupPrefix + strconv.Itoa(os.Getpid()) + "-" + suffix
}

// ownerAlive says whether the test process that made the node cgroup parent
// called name still runs: nodes of other test binaries run side by side, and
// their parents are theirs to remove, even while empty.
func ownerAlive(name string) bool {
	pid, _, ok := strings.Cut(strings.TrimPrefix(name, cgroupPrefix), "-")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || n <= 0 {
		return false
	}
	err = syscall.Kill(n, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

const cgroupFS = "/sys/fs/cgroup"

// hierarchies are the mounted cgroup hierarchies: the v1 controllers, the
// named systemd one and the (empty) v2 one, each of which the kubelet, runc
// or both write to.
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, e := range entries {
		h := filepath.Join(cgroupFS, e.Name())
		if fi, err := os.Lstat(h); err != nil || !fi.IsDir() {
			continue // cpu,cpuacct style links
		}
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy under %s", cgroupFS)
	}
	return hs, nil
}

// createCgroups makes root in every hierarchy: the kubelet refuses a
// cgroupRoot that is missing in any of its controllers.
func createCgroups(root string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, root)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		// A new cpuset has no CPUs and no memory nodes until given its
		// parent's.
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroups removes root and everything under it in every hierarchy,
// deepest first. A cgroup can be busy for a moment after its last process
// has exited, so it retries until timeout. Processes still in them are an
// error: the node's PID namespace should have ended them.
func removeCgroups(root string, timeout time.Duration) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var errs []error
		for _, h := range hs {
			errs = append(errs, removeTree(filepath.Join(h, root)))
		}
		err := errors.Join(errs...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func removeTree(top string) error {
	var dirs []string
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// Deepest first.
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			if procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(procs) > 0 {
				return fmt.Errorf("%s still holds processes %s", d, strings.Fields(string(procs)))
			}
			return err
		}
	}
	return nil
}

// removeStaleCgroups removes the empty parents of earlier runs whose test
// process was killed before it could clean up.
func removeStaleCgroups(t *testing.T) {
	hs, err := hierarchies()
	if err != nil {
		return
	}
	for _, h := range hs {
		stale, _ := filepath.Glob(filepath.Join(h, cgroupPrefix+"*"))
		for _, s := range stale {
			if ownerAlive(filepath.Base(s)) {
				continue
			}
			if err := removeTree(s); err != nil {
				t.Logf("left a stale node cgroup alone: %v", err)
			} else {
				t.Logf("removed the stale node cgroup %s", s)
			}
		}
	}
}
