package resources

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/watchcache/watchcache-exporter/internal/pause"
)

// Set is the resources measured now: those --resources named at start, then
// what discovery says at each of Run's intervals, so that a CRD installed
// later is measured and a removed one dropped, without a restart.
type Set struct {
	resolve func(context.Context) ([]Resource, error)
	log     logr.Logger

	mu      sync.Mutex
	current []Resource
}

// Fixed is a Set that never changes.
func Fixed(rs []Resource) *Set { return &Set{current: rs} }

// NewSet starts from rs; resolve is what Run asks again. It returns the
// resources to measure; with an error too when some named resource is not
// served now, and nil when it cannot tell (discovery failed): the set is
// then kept as it was.
func NewSet(rs []Resource, resolve func(context.Context) ([]Resource, error), log logr.Logger) *Set {
	return &Set{current: rs, resolve: resolve, log: log}
}

// Current is the resources to measure, sorted; the caller must not change
// the slice.
func (s *Set) Current() []Resource {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// Run resolves the set again every interval until ctx ends, the first time
// one interval after it starts (the set was resolved at start).
func (s *Set) Run(ctx context.Context, interval time.Duration) {
	if s.resolve == nil || pause.For(ctx, interval) != nil {
		return
	}
	wait.UntilWithContext(ctx, s.refresh, interval)
}

func (s *Set) refresh(ctx context.Context) {
	rs, err := s.resolve(ctx)
	if ctx.Err() != nil {
		return
	}
	if rs == nil && err != nil {
		s.log.Error(err, "discovery failed: the resources measured stay as they were")
		return
	}
	if err != nil {
		s.log.Info("resources named in --resources are not served now: not measured until they are", "reason", err.Error())
	}
	s.mu.Lock()
	old := s.current
	s.current = rs
	s.mu.Unlock()
	added, removed := Diff(old, rs)
	if len(added)+len(removed) > 0 {
		s.log.Info("the resources served changed: measuring the new ones, dropping the series of those gone",
			"added", Names(added), "removed", Names(removed), "count", len(rs))
	}
}

// Diff is what changed from a to b: the resources of b not in a, and of a
// not in b.
func Diff(a, b []Resource) (added, removed []Resource) {
	keys := func(rs []Resource) sets.Set[Name] {
		out := sets.New[Name]()
		for _, r := range rs {
			out.Insert(r.Key())
		}
		return out
	}
	inA, inB := keys(a), keys(b)
	for _, r := range b {
		if !inA.Has(r.Key()) {
			added = append(added, r)
		}
	}
	for _, r := range a {
		if !inB.Has(r.Key()) {
			removed = append(removed, r)
		}
	}
	return added, removed
}

// Names are the resources' names, for logs.
func Names(rs []Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name()
	}
	return out
}

// Pace is how often each resource is measured: every Interval, stretched so
// that a round (a window probe of each resource on every apiserver and one
// object count of each, so at most 2 requests per resource on any one
// apiserver) sends no more than Budget requests a second to an apiserver.
type Pace struct {
	Interval time.Duration
	Budget   float64 // requests/s per apiserver; 0: no budget
}

// For is the interval for n resources.
func (p Pace) For(n int) time.Duration {
	if p.Budget <= 0 {
		return p.Interval
	}
	return max(p.Interval, time.Duration(float64(2*n)/p.Budget*float64(time.Second)))
}

// Run calls round with the set's current resources until ctx ends, each
// round p.For(len(rs)) after the previous one began, or at its end when it
// took longer; after each, done gets the interval that round really took
// up. done may be nil.
func (p Pace) Run(ctx context.Context, set *Set, round func(context.Context, []Resource), done func([]Resource, time.Duration)) {
	for ctx.Err() == nil {
		start := time.Now()
		rs := set.Current()
		ivl := p.For(len(rs))
		round(ctx, rs)
		if ctx.Err() != nil {
			return
		}
		if done != nil {
			done(rs, max(ivl, time.Since(start)))
		}
		if pause.For(ctx, time.Until(start.Add(ivl))) != nil {
			return
		}
	}
}
