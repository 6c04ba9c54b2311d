package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// signalChildEnv makes TestSignalContext's child run SignalContext.
const signalChildEnv = "WATCHCACHE_SIGNAL_CHILD"

// The first SIGINT ends the context (the cleanup begins); the second ends
// the process at once, as a shell user expects of Ctrl-C twice. SIGHUP (the
// terminal closed) ends the context too.
func TestSignalContext(t *testing.T) {
	if os.Getenv(signalChildEnv) != "" {
		ctx, stop := SignalContext()
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		time.Sleep(time.Second) // for SignalContext to give the signals back
		fmt.Println("cleaning up")
		time.Sleep(3 * time.Second)
		fmt.Println("cleaned up")
		return
	}
	for _, tc := range []struct {
		name    string
		signals []syscall.Signal
		killed  bool // by the last signal, before its cleanup ended
	}{
		{"Ctrl-C twice", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, true},
		{"terminal closed", []syscall.Signal{syscall.SIGHUP}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSignalContext$")
			cmd.Env = append(os.Environ(), signalChildEnv+"=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 10)
			go func() {
				defer close(lines)
				buf := make([]byte, 4096)
				var rest string
				for {
					n, err := out.Read(buf)
					rest += string(buf[:n])
					for strings.Contains(rest, "\n") {
						i := strings.Index(rest, "\n")
						lines <- rest[:i]
						rest = rest[i+1:]
					}
					if err != nil {
						return
					}
				}
			}()
			expect := func(want string) {
				t.Helper()
				select {
				case l := <-lines:
					if l != want {
						t.Fatalf("child said %q, want %q", l, want)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("child silent, want %q", want)
				}
			}
			expect("ready")
			for i, sig := range tc.signals {
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					expect("cleaning up")
				}
			}
			cleaned := false
			for l := range lines {
				cleaned = cleaned || l == "cleaned up"
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled()
			if killed != tc.killed || (tc.killed && ee.Sys().(syscall.WaitStatus).Signal() != tc.signals[len(tc.signals)-1]) {
				t.Errorf("child ended with %v, want killed by the last signal: %v", err, tc.killed)
			}
			if cleaned == tc.killed {
				t.Errorf("child's cleanup ended: %v, want %v", cleaned, !tc.killed)
			}
		})
	}
}
