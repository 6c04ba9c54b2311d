package leader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/watchcache/watchcache-exporter/test/typed"
)

// candidate is one exporter process: an Elector and what its lead saw.
type candidate struct {
	e       *Elector
	cancel  context.CancelFunc
	done    chan struct{}
	leading atomic.Int32 // leads running now
	leads   atomic.Int32 // leads started
	held    atomic.Value // of the last lead's end: bool
}

func start(t *testing.T, cs *fake.Clientset, id string) *candidate {
	t.Helper()
	e, err := New(Config{Namespace: "ns", Name: "quiet", Identity: id}, typed.Leases(cs.CoordinationV1()), prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		e.Run(ctx, func(ctx context.Context, held func() bool) {
			c.leads.Add(1)
			c.leading.Add(1)
			<-ctx.Done()
			c.held.Store(held())
			c.leading.Add(-1)
		})
	}()
	return c
}

func (c *candidate) stop() { c.cancel(); <-c.done }

func (c *candidate) gauge() float64 { return testutil.ToFloat64(c.e.leader) }

// One of two candidates leads; on a graceful stop it ends its lead while
// still holding the Lease, releases and deletes it, and the standby leads
// within a retry period. Never do both lead at once.
func TestHandOverOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset()
		a := start(t, cs, "a")
		time.Sleep(time.Second)
		b := start(t, cs, "b")
		time.Sleep(5 * time.Second)
		if a.leading.Load() != 1 || b.leading.Load() != 0 || a.gauge() != 1 || b.gauge() != 0 {
			t.Fatalf("leading a=%d b=%d, gauges %v %v; want a alone", a.leading.Load(), b.leading.Load(), a.gauge(), b.gauge())
		}
		if a.e.Standby() || !b.e.Standby() {
			t.Errorf("standby: a %v, b %v; want b only", a.e.Standby(), b.e.Standby())
		}
		a.stop()
		if held, _ := a.held.Load().(bool); !held {
			t.Error("a's lead ended on shutdown without the Lease held")
		}
		if a.gauge() != 0 {
			t.Error("a still says it leads")
		}
		time.Sleep(2*RetryPeriod + time.Second)
		if b.leading.Load() != 1 || b.gauge() != 1 {
			t.Errorf("b not leading %s after a stopped", 2*RetryPeriod+time.Second)
		}
		b.stop()
		if _, err := cs.CoordinationV1().Leases("ns").Get(t.Context(), "quiet", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease after the last stop: %v, want it deleted", err)
		}
	})
}

// A holder that cannot renew (its apiserver refuses, as when it is down for
// it) ends its lead before RenewDeadline has passed twice, with the Lease not
// held, and leads again once renewals work; the standby takes over after
// LeaseDuration, never while the holder still leads.
func TestLoseOnFailedRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset()
		var mu sync.Mutex
		broken := map[string]bool{} // holder identity whose updates fail
		cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
			l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
			mu.Lock()
			defer mu.Unlock()
			if l.Spec.HolderIdentity != nil && broken[*l.Spec.HolderIdentity] {
				return true, nil, errors.New("connection refused")
			}
			return false, nil, nil
		})
		a := start(t, cs, "a")
		time.Sleep(time.Second)
		b := start(t, cs, "b")
		time.Sleep(3 * time.Second)
		if a.leading.Load() != 1 || b.leading.Load() != 0 {
			t.Fatal("a does not lead alone")
		}
		mu.Lock()
		broken["a"] = true
		mu.Unlock()
		lostBy := time.Now().Add(RenewDeadline + 2*RetryPeriod)
		for a.leading.Load() == 1 && time.Now().Before(lostBy) {
			if b.leading.Load() == 1 {
				t.Fatal("both lead")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if a.leading.Load() != 0 || a.gauge() != 0 {
			t.Fatalf("a still leads %s after its renewals began to fail", RenewDeadline+2*RetryPeriod)
		}
		if held, _ := a.held.Load().(bool); held {
			t.Error("a's lead ended with the Lease held")
		}
		time.Sleep(LeaseDuration)
		if b.leading.Load() != 1 {
			t.Error("b did not take over")
		}
		mu.Lock()
		broken["a"] = false
		mu.Unlock()
		b.stop()
		time.Sleep(3 * RetryPeriod)
		if a.leading.Load() != 1 || a.leads.Load() != 2 {
			t.Errorf("a leads %d (started %d) after b stopped; want it leading again", a.leading.Load(), a.leads.Load())
		}
		a.stop()
	})
}

// A Lease of the same name without the exporter's mark is never taken, even
// when free, and is left exactly as it was.
func TestNeverTakesAnotherLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "quiet", ResourceVersion: "7"}})
		a := start(t, cs, "a")
		time.Sleep(LeaseDuration + 3*RetryPeriod)
		if a.leads.Load() != 0 || a.gauge() != 0 {
			t.Errorf("led %d times with another's Lease, want never", a.leads.Load())
		}
		if theirs, err := a.e.NotOurs(t.Context()); err != nil || !theirs {
			t.Errorf("NotOurs = %v, %v; want true", theirs, err)
		}
		a.stop()
		l, err := cs.CoordinationV1().Leases("ns").Get(t.Context(), "quiet", metav1.GetOptions{})
		if err != nil || l.ResourceVersion != "7" || l.Spec.HolderIdentity != nil {
			t.Errorf("their Lease after the run: %v, %+v; want it as it was", err, l)
		}
	})
}
