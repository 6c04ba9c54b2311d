package testcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// RequireEnv, when "1", turns a missing binary into a test failure instead of
// a skip. make test and .ci/run set it.
const RequireEnv = "WATCHCACHE_REQUIRE_KUBE"

// Start starts a cluster for t and stops it when t ends; on failure the
// process logs are kept and named. Without binaries the test is skipped, or
// failed when $WATCHCACHE_REQUIRE_KUBE=1. Clusters of concurrently running
// test binaries take turns, so that timings measured on one are not skewed by
// another's load.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.BinDir == "" {
		bin, err := FindBinDir()
		if err != nil {
			t.Fatal(err)
		}
		opts.BinDir = bin
	}
	if err := CheckBinaries(opts.BinDir); err != nil {
		Missing(t, err.Error())
	}
	unlock := LockMachine(t)
	t.Cleanup(unlock)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
		if t.Failed() {
			t.Logf("control-plane logs kept in %s (etcd.log, apiserver-N.log)", c.Dir())
			return
		}
		_ = c.RemoveDir()
	})
	return c
}

// Missing ends a test whose precondition (a binary, a package) is missing:
// a skip with msg, or a failure when $WATCHCACHE_REQUIRE_KUBE=1, so that
// make test and CI never skip what they must run.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// LockMachine takes an exclusive lock shared by every test binary on this
// machine, so that timings measured on one control plane are not skewed by
// another's load. The kernel drops it when the process dies.
func LockMachine(t testing.TB) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "watchcache-exporter-testcluster.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(fmt.Errorf("lock %s: %w", f.Name(), err))
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %s for another test's control plane", d.Round(time.Second))
	}
	return func() { f.Close() }
}
