// Package testnetns runs a test again in a child process with namespaces of
// its own, so that it may add addresses, interfaces and routes that the
// kernel removes with the namespace, however the child ends; and it checks
// that the machine's own network and mounts are the same afterwards.
package testnetns

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// childEnv marks the child of Run and carries its addresses.
const childEnv = "WATCHCACHE_TESTNETNS"

// Run runs fn in a network namespace of its own, where loopback is up and
// addrs (IPv4, one /24) are on one end of a veth pair whose both ends stay
// in the namespace: this kernel has no dummy interfaces, and EndpointSlices
// refuse loopback addresses. Called in the test's own process, it runs the
// test again in that namespace and waits for it; called in the child, it
// sets the namespace up and runs fn. Run must be called from a top-level
// test, as the first thing it does. It needs root and ip (iproute2).
func Run(t *testing.T, addrs []string, fn func(t *testing.T)) {
	t.Helper()
	testcluster.Real(t)
	if env := os.Getenv(childEnv); env != "" {
		var got []string
		if err := json.Unmarshal([]byte(env), &got); err != nil {
			t.Fatalf("%s: %v", childEnv, err)
		}
		if err := setup(got); err != nil {
			t.Fatalf("network namespace: %v", err)
		}
		fn(t)
		return
	}
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the test makes a network namespace)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		missing = append(missing, "ip is not on the PATH; install Debian's iproute2 (make node-bin does)")
	}
	if len(missing) > 0 {
		testcluster.Missing(t, strings.Join(missing, "; "))
	}
	env, _ := json.Marshal(addrs)
	before := HostState(t)
	start := time.Now()
	interrupted, err := Reexec(t, syscall.CLONE_NEWNET, childEnv+"="+string(env))
	t.Logf("test ran %s in its network namespace", time.Since(start).Round(time.Second))
	if after := HostState(t); after != before {
		t.Errorf("the machine's own network namespace or mounts changed while the test ran:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if interrupted != "" {
		t.Fatalf("interrupted (%s): the test's namespace and processes were killed", interrupted)
	}
	if err != nil {
		t.Fatalf("the test in its network namespace failed (%v)", err)
	}
}

// setup brings loopback up and puts addrs on a veth pair.
func setup(addrs []string) error {
	cmds := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "wce0", "type", "veth", "peer", "name", "wce1"},
	}
	for _, a := range addrs {
		cmds = append(cmds, []string{"addr", "add", a + "/24", "dev", "wce0"})
	}
	cmds = append(cmds, []string{"link", "set", "wce0", "up"}, []string{"link", "set", "wce1", "up"})
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// Reexec runs the calling top-level test again in a child process with the
// namespaces of cloneflags and env added to its environment, relays its
// output to t.Log, and waits for it. The child dies with this process; an
// interrupt (Ctrl-C, SIGTERM) kills it so that the caller can still clean
// up, and is returned as interrupted.
func Reexec(t *testing.T, cloneflags uintptr, env string) (interrupted string, err error) {
	t.Helper()
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v", "-test.count=1"}
	if dl, ok := t.Deadline(); ok {
		// The child ends first, so that the parent can still clean up.
		args = append(args, "-test.timeout="+(time.Until(dl)-time.Minute).Round(time.Second).String())
	}
	if f := flag.Lookup("test.failfast"); f != nil && f.Value.String() == "true" {
		args = append(args, "-test.failfast")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: cloneflags, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	stopped := make(chan struct{})
	var got atomic.Value
	go func() {
		select {
		case s := <-sigs:
			got.Store(s.String())
			_ = cmd.Process.Kill()
		case <-stopped:
		}
	}()
	defer func() {
		signal.Stop(sigs)
		close(stopped)
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		t.Log(sc.Text())
	}
	err = cmd.Wait()
	if s, ok := got.Load().(string); ok {
		interrupted = s
	}
	if err == nil && interrupted != "" {
		err = errors.New("interrupted")
	}
	return interrupted, err
}

// packetCounts are iptables-save's [packets:bytes], which change by
// themselves.
var packetCounts = regexp.MustCompile(`\[\d+:\d+\]`)

// HostState is what a test in namespaces of its own must not change in the
// machine's: the interfaces with their addresses, the routes, the iptables
// rules (when iptables is installed), and the mounts.
func HostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	cmds := [][]string{{"ip", "-o", "addr"}, {"ip", "route"}}
	if _, err := exec.LookPath("iptables-save"); err == nil {
		cmds = append(cmds, []string{"iptables-save"})
	}
	for _, args := range cmds {
		out, err := exec.Command(args[0], args[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// iptables-save stamps its output.
			if strings.HasPrefix(line, "#") {
				continue
			}
			b.WriteString(packetCounts.ReplaceAllString(line, "") + "\n")
		}
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	b.Write(mounts)
	return b.String()
}
