// Package leader keeps one writer per namespace and quiet name: a
// coordination.k8s.io Lease held for the life of the process, by the
// algorithm of client-go's leader election (term.go). Only the holder
// writes; a standby writes and touches nothing until it takes the Lease over.
package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/pause"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// Timing of the Lease: a holder that cannot renew for RenewDeadline stops at
// once, 20 s before a standby may take the Lease, LeaseDuration after the
// last renewal. Four times kube-controller-manager's: the holder keeps the
// Lease through an apiserver restart (~15 s), so the restart is measured as
// a cache reset rather than lost with the measurement; a killed holder is
// replaced within a minute; renewals add one write every 5 s.
const (
	LeaseDuration = 60 * time.Second
	RenewDeadline = 40 * time.Second
	RetryPeriod   = 5 * time.Second
)

// Config of an Elector.
type Config struct {
	Namespace, Name string // of the Lease
	Identity        string // this process; see Identity
	// Timing; zero values take the defaults above (tests shorten them).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// StopDeadline is when a shutdown's deletion of the Lease must be done
	// by; nil: RenewDeadline after it begins.
	StopDeadline func() time.Time
	// OwnerReferences of a Lease this Elector creates (owned.ServiceAccountOwner).
	OwnerReferences []metav1.OwnerReference
}

// Identity is this process's name in the Lease: the pod's name (or the
// host's) and a random suffix, so that a restarted process is a new holder.
func Identity() string {
	host := os.Getenv("POD_NAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

// Elector campaigns for the Lease.
type Elector struct {
	cfg    Config
	client kube.LeasesGetter
	log    logr.Logger
	leader prometheus.Gauge
	lead   atomic.Bool
	holder atomic.Value // string: the holder last seen in the Lease
}

// New validates cfg and registers watchcache_exporter_leader on reg.
func New(cfg Config, client kube.LeasesGetter, reg prometheus.Registerer, log logr.Logger) (*Elector, error) {
	if cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return nil, errors.New("leader: Namespace, Name and Identity are required")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = LeaseDuration, RenewDeadline, RetryPeriod
	}
	e := &Elector{cfg: cfg, client: client, log: log,
		leader: promauto.With(reg).NewGauge(promopts.Gauge("exporter_leader",
			"1 while this exporter holds the Lease of its namespace and quiet name and so writes the load and runs the measurement; 0 on a standby.")),
	}
	if cfg.RetryPeriod <= 0 || float64(cfg.RenewDeadline) <= jitter*float64(cfg.RetryPeriod) || cfg.LeaseDuration <= cfg.RenewDeadline {
		return nil, fmt.Errorf("leader: want LeaseDuration %s > RenewDeadline %s > %v x RetryPeriod %s > 0", cfg.LeaseDuration, cfg.RenewDeadline, jitter, cfg.RetryPeriod)
	}
	return e, nil
}

// NotOurs says whether the Lease exists without the exporter's mark: one it
// must never take.
func (e *Elector) NotOurs(ctx context.Context) (bool, error) {
	l, err := e.client.Leases(e.cfg.Namespace).Get(ctx, e.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return !marked(l), nil
}

// HeldByOther names the holder of the Lease when another process holds it
// and its term has not run out; "" when the Lease is free to take.
func (e *Elector) HeldByOther(ctx context.Context) (string, error) {
	l, err := e.client.Leases(e.cfg.Namespace).Get(ctx, e.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	}
	h := ""
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	if h == "" || h == e.cfg.Identity {
		return "", nil
	}
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil &&
		time.Since(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
		return "", nil // its holder stopped renewing it
	}
	return h, nil
}

// marked says whether l carries the exporter's label: only such a Lease is
// ever written.
func marked(l *coordinationv1.Lease) bool { return l.Labels[owned.ManagedByLabel] == owned.ManagedBy }

// Leading says whether lead runs now.
func (e *Elector) Leading() bool { return e.lead.Load() }

// Standby says whether another exporter holds the Lease, as last seen.
func (e *Elector) Standby() bool {
	h := e.Holder()
	return !e.Leading() && h != "" && h != e.cfg.Identity
}

// Holder is the holder of the Lease as last seen; "" when none was seen.
func (e *Elector) Holder() string {
	h, _ := e.holder.Load().(string)
	return h
}

// Identity is the name this Elector holds the Lease under.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Run campaigns until ctx ends. Each time this process wins the Lease, lead
// runs with a context that ends the moment the Lease is lost or ctx ends;
// held says which (true: still held, so this is a shutdown). Run waits for
// lead to return, then, on shutdown, deletes the Lease if it still holds it:
// lead's last work (deleting the exporter's objects) happens while it still
// holds the Lease.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, held func() bool)) {
	for ctx.Err() == nil {
		e.campaign(ctx, lead)
		if pause.For(ctx, e.cfg.RetryPeriod) != nil {
			return
		}
	}
}

// campaign is one term: acquire the Lease, lead while it is renewed, until
// a renewal fails for RenewDeadline or ctx ends.
func (e *Elector) campaign(ctx context.Context, lead func(ctx context.Context, held func() bool)) {
	electCtx, cancelElect := context.WithCancel(context.Background())
	defer cancelElect()
	var (
		mu       sync.Mutex
		over     bool          // Run returned: too late to lead
		leadDone chan struct{} // while lead runs
	)
	// A standby stops at once; a leader once lead has returned.
	stopStandby := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if leadDone == nil {
			cancelElect()
		}
	})
	defer stopStandby()
	released := false
	onStarted := func(lctx context.Context) {
		mu.Lock()
		if over || lctx.Err() != nil || ctx.Err() != nil {
			mu.Unlock()
			cancelElect()
			return
		}
		done := make(chan struct{})
		leadDone = done
		mu.Unlock()
		defer close(done)
		e.leader.Set(1)
		e.lead.Store(true)
		e.log.Info("holding the lease: writing and measuring", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
		leadCtx, cancel := context.WithCancel(lctx)
		stop := context.AfterFunc(ctx, cancel)
		lead(leadCtx, func() bool { return lctx.Err() == nil })
		stop()
		cancel()
		e.leader.Set(0)
		e.lead.Store(false)
		if ctx.Err() != nil {
			released = true
			cancelElect() // renew stops; deleteHeld releases
		} else {
			e.log.Info("lost the lease: stopped writing and measuring; the objects stay for the next holder", "lease", e.cfg.Namespace+"/"+e.cfg.Name)
		}
	}
	t := &term{e: e}
	if t.acquire(electCtx) {
		lctx, cancelLead := context.WithCancel(electCtx)
		var wg sync.WaitGroup
		wg.Go(func() { onStarted(lctx) })
		t.renew(lctx)
		cancelLead()
		wg.Wait()
	}
	mu.Lock()
	over = true
	done := leadDone
	mu.Unlock()
	if done != nil {
		<-done
	}
	if released {
		e.deleteHeld()
	}
}

// deleteHeld deletes the Lease on shutdown if this process still holds it,
// guarded by the UID and resourceVersion of the read that says so, within
// the shutdown's deadline. A Lease it cannot delete expires: a standby takes
// it LeaseDuration after the last renewal.
func (e *Elector) deleteHeld() {
	deadline := time.Now().Add(e.cfg.RenewDeadline)
	if e.cfg.StopDeadline != nil {
		deadline = e.cfg.StopDeadline()
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	leases := e.client.Leases(e.cfg.Namespace)
	l, err := leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if err == nil && marked(l) && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == e.cfg.Identity {
		err = leases.Delete(ctx, e.cfg.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	}
	switch {
	case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err): // deleted, or taken meanwhile
		e.log.Info("released the lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name)
	default:
		e.log.Error(err, fmt.Sprintf("the lease is left; a standby takes it %s after the last renewal", e.cfg.LeaseDuration), "lease", e.cfg.Namespace+"/"+e.cfg.Name)
	}
}
