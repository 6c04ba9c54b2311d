package daemon

import (
	"log/slog"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// setMemoryLimit sets the Go runtime's soft memory limit to 90% of the
// container's (cgroup v1 or v2), so that the garbage collector works harder
// before the kernel kills the pod; GOMEMLIMIT in the environment wins.
// GOMAXPROCS already follows the container's CPU limit (Go 1.25+).
func setMemoryLimit(log *slog.Logger) {
	_, _ = memlimit.Set(memlimit.WithRatio(0.9), memlimit.WithLogger(log))
}
