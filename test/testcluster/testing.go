package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RequireEnv, when "1", turns a missing binary into a test failure instead of
// a skip. make test and .ci/run set it.
const RequireEnv = "WATCHCACHE_REQUIRE_KUBE"

// Start starts a cluster for t and stops it when t ends; on failure the
// process logs are kept and named. Without binaries the test is skipped, or
// failed when $WATCHCACHE_REQUIRE_KUBE=1. It first takes opts.Slots of the
// machine's slots (see TakeSlots) for as long as t runs.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Real(t)
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
	t.Cleanup(TakeSlots(t, opts.Slots))
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

// Real marks t as a test of real components (a control plane, a node, a
// network namespace, Prometheus, a browser, a built image): `go test -short`
// (make test-unit) skips it, so that the unit tier needs only Go and gcc.
func Real(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs real components: not in the unit tier (-short)")
	}
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

// SlotsEnv sets how many slots the machine has: how many control planes of
// weight 1 run at once across every test binary. Default DefaultSlots.
const SlotsEnv = "WATCHCACHE_TEST_SLOTS"

// DefaultSlots: at the suite's 10-100 writes/s an apiserver and its etcd use
// a small part of one of this machine's two cores, so that a few run side by
// side without skewing what each measures.
const DefaultSlots = 4

// Alone, as a weight, asks for every slot: the machine to itself.
const Alone = -1

// TakeSlots takes weight of the machine's slots (at least one; Alone: all of
// them), shared by every test binary through lock files, and returns the
// function that gives them back. Takers queue in turn behind a gate, so that
// a test that asks for the machine alone is not starved by smaller ones. The
// kernel drops the locks when the process dies.
func TakeSlots(t testing.TB, weight int) func() {
	t.Helper()
	n := DefaultSlots
	if v := os.Getenv(SlotsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("$%s=%q: want a whole number of slots, at least 1", SlotsEnv, v)
		}
	}
	switch {
	case weight == Alone || weight > n:
		weight = n
	case weight < 1:
		weight = 1
	}
	start := time.Now()
	gate := lockFile(t, "gate")
	defer gate.Close()
	var held []*os.File
	for {
		for i := 0; i < n && len(held) < weight; i++ {
			if f := tryLockFile(t, "slot-"+strconv.Itoa(i)); f != nil {
				held = append(held, f)
			}
		}
		if len(held) == weight {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %s for %d of the machine's %d test slots", d.Round(time.Second), weight, n)
	}
	return func() {
		for _, f := range held {
			f.Close()
		}
	}
}

// lockFile opens the named lock file of the machine's test slots and locks
// it, waiting for it.
func lockFile(t testing.TB, name string) *os.File {
	t.Helper()
	f := openLockFile(t, name)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", f.Name(), err)
	}
	return f
}

// tryLockFile is lockFile with an exclusive lock, or nil when another holds it.
func tryLockFile(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := tryLock(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Claim marks name as in use by this process for as long as t runs, through
// a lock file the kernel drops when the process dies; Claimed tells another
// process whether a live one holds it. Harnesses that delete what an
// interrupted run left use it to spare what a running test binary made.
func Claim(t testing.TB, name string) {
	t.Helper()
	f := tryLockFile(t, "claim-"+name)
	if f == nil {
		t.Fatalf("%s is claimed by another running test", name)
	}
	t.Cleanup(func() {
		os.Remove(f.Name())
		f.Close()
	})
}

// Claimed reports whether a live process holds Claim's lock on name.
func Claimed(t testing.TB, name string) bool {
	t.Helper()
	f := tryLockFile(t, "claim-"+name)
	if f == nil {
		return true
	}
	os.Remove(f.Name())
	f.Close()
	return false
}

// tryLock locks the named lock file of the machine's tests without waiting:
// nil when another process holds it. FreePort's reservations use it too.
func tryLock(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "watchcache-exporter-test-"+name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

func openLockFile(t testing.TB, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "watchcache-exporter-test-"+name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
