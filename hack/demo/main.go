// Command demo starts the local control plane (etcd and kube-apiserver from
// bin/), writes .demo/kubeconfig, and runs bin/watchcache-exporter against
// it with the arguments it was given. Ctrl-C stops all of it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := filepath.Abs(".demo")
	if err != nil {
		return err
	}
	// A previous demo's etcd data is stale: its apiserver is gone.
	if err := os.RemoveAll(filepath.Join(dir, "cluster")); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "demo: starting etcd and kube-apiserver (logs in .demo/cluster)")
	c, err := testcluster.New(ctx, testcluster.Options{Dir: filepath.Join(dir, "cluster")})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "demo: stopping the control plane")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testcluster.WriteKubeconfig(kubeconfig, c.AdminConfig()); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "demo: apiserver %s; kubectl --kubeconfig %s get configmaps\n", c.APIServer().URL(), kubeconfig)

	args := append([]string{"--kubeconfig=" + kubeconfig, "--web.listen-address=127.0.0.1:9890", "--log.format=text"}, os.Args[1:]...)
	exp := exec.Command(filepath.Join("bin", "watchcache-exporter"), args...)
	exp.Stdout, exp.Stderr = os.Stdout, os.Stderr
	exp.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := exp.Start(); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "demo: exporter on http://127.0.0.1:9890/metrics; Ctrl-C stops everything")
	done := make(chan error, 1)
	go func() { done <- exp.Wait() }()
	select {
	case err := <-done:
		return fmt.Errorf("exporter exited: %w", err)
	case <-ctx.Done():
	}
	_ = exp.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return err
		}
	case <-time.After(20 * time.Second):
		_ = exp.Process.Kill()
		return errors.New("exporter did not stop within 20 s of SIGTERM; killed")
	}
	return nil
}
