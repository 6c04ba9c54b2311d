package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is one binary of the control plane or node, run as a child of this
// process with its output appended to LogPath.
type Process struct {
	Name    string
	Path    string
	Args    []string
	Env     []string // added to this process's environment
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done
}

// Start starts the process; it does not wait for it to be ready.
func (p *Process) Start() error {
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== %s %s: %s %q\n", time.Now().Format(time.RFC3339Nano), p.Name, p.Path, p.Args)
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = log, log
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The kernel kills the child when this process dies, whatever the
		// cause (test timeout panic, os.Exit, SIGKILL), so nothing outlives
		// the test binary.
		Pdeathsig: syscall.SIGKILL,
		// Its own process group: a Ctrl-C reaches this process, which stops
		// the child in order (apiserver before etcd) instead of racing it.
		Setpgid: true,
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd, p.log, p.done, p.err = cmd, log, make(chan struct{}), nil
	go func(done chan struct{}) {
		p.err = cmd.Wait()
		log.Close()
		close(done)
	}(p.done)
	return nil
}

// Running reports whether the process was started and has not exited.
func (p *Process) Running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM, and SIGKILL if the process has not exited after grace.
func (p *Process) Stop(grace time.Duration) error {
	if p.done == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	<-p.done
	return nil
}

// Exited reports the exit status when the process has ended.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}
