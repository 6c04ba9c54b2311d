package leader

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/pause"
)

// jitter spreads the attempts to acquire, as client-go's JitterFactor.
const jitter = 1.2

// term is one campaign's view of the Lease. It follows client-go's leader
// election (tools/leaderelection), which the exporter does not import: that
// package brings in a scheme of every API group, a third of the exporter's
// memory. A Lease is valid while LeaseDuration has not passed since this
// process last saw it change, by its own clock: the holder's clock does not
// count. Every write is guarded by the resourceVersion last read.
type term struct {
	e        *Elector
	lease    *coordinationv1.Lease // as last read or written
	observed time.Time             // when lease last changed, as seen here
	reported string                // the holder last reported
	notOurs  bool                  // a Lease of that name without the exporter's marks
}

// acquire tries every RetryPeriod (jittered) until it holds the Lease, or
// ctx ends (false).
func (t *term) acquire(ctx context.Context) bool {
	for {
		if t.tryAcquireOrRenew(ctx) {
			return true
		}
		if pause.For(ctx, wait.Jitter(t.e.cfg.RetryPeriod, jitter)) != nil {
			return false
		}
	}
}

// renew renews every RetryPeriod and returns when ctx ends, or when no
// renewal has succeeded for RenewDeadline: the Lease is then lost, with
// LeaseDuration - RenewDeadline to spare before a standby may take it.
func (t *term) renew(ctx context.Context) {
	for {
		if pause.For(ctx, t.e.cfg.RetryPeriod) != nil {
			return
		}
		deadline, cancel := context.WithTimeout(ctx, t.e.cfg.RenewDeadline)
		err := wait.PollUntilContextCancel(deadline, t.e.cfg.RetryPeriod, true, func(ctx context.Context) (bool, error) {
			return t.tryAcquireOrRenew(ctx), nil
		})
		cancel()
		if err != nil {
			return
		}
	}
}

func (t *term) holding() bool {
	return t.lease != nil && ptr.Deref(t.lease.Spec.HolderIdentity, "") == t.e.cfg.Identity
}

func (t *term) valid(now time.Time) bool { return now.Before(t.observed.Add(t.e.cfg.LeaseDuration)) }

// tryAcquireOrRenew is client-go's step of the same name: renew a Lease
// held, take one free or expired, or see who holds it.
func (t *term) tryAcquireOrRenew(ctx context.Context) bool {
	leases := t.e.client.Leases(t.e.cfg.Namespace)
	now := time.Now()
	// Holding it: renew from the Lease as last written.
	if t.holding() && t.valid(now) {
		if l, err := leases.Update(ctx, t.spec(t.lease.DeepCopy(), now), metav1.UpdateOptions{}); err == nil {
			t.seen(l, now)
			return true
		}
	}
	l, err := leases.Get(ctx, t.e.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: t.e.cfg.Namespace, Name: t.e.cfg.Name,
			Labels: map[string]string{owned.ManagedByLabel: owned.ManagedBy}, OwnerReferences: t.e.cfg.OwnerReferences}}
		if l, err = leases.Create(ctx, t.spec(l, now), metav1.CreateOptions{}); err != nil {
			return false
		}
		t.seen(l, now)
		return true
	case err != nil:
		return false
	}
	if !marked(l) {
		if !t.notOurs {
			t.notOurs = true
			t.e.log.Info("the lease is not this exporter's (no "+owned.ManagedByLabel+"="+owned.ManagedBy+" label): never taken; choose another name with --quiet.name",
				"lease", t.e.cfg.Namespace+"/"+t.e.cfg.Name)
		}
		return false
	}
	if t.lease == nil || l.ResourceVersion != t.lease.ResourceVersion {
		t.seen(l, now)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != "" && !t.holding() && t.valid(now) {
		return false // another's, and renewed within LeaseDuration
	}
	if l, err = leases.Update(ctx, t.spec(l.DeepCopy(), now), metav1.UpdateOptions{}); err != nil {
		return false
	}
	t.seen(l, now)
	return true
}

// spec makes l this process's: renewed now, acquired now unless it already
// held it, one transition more if it changes hands (none for a new Lease).
func (t *term) spec(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	s := &l.Spec
	if ptr.Deref(s.HolderIdentity, "") != t.e.cfg.Identity {
		if l.ResourceVersion == "" {
			s.LeaseTransitions = ptr.To[int32](0)
		} else {
			s.LeaseTransitions = ptr.To(ptr.Deref(s.LeaseTransitions, 0) + 1)
		}
		s.AcquireTime = &metav1.MicroTime{Time: now}
	}
	s.HolderIdentity = ptr.To(t.e.cfg.Identity)
	s.LeaseDurationSeconds = ptr.To(int32(t.e.cfg.LeaseDuration / time.Second))
	s.RenewTime = &metav1.MicroTime{Time: now}
	return l
}

// seen records l as the Lease's state at now, and reports a new holder.
func (t *term) seen(l *coordinationv1.Lease, now time.Time) {
	t.lease, t.observed = l, now
	h := ptr.Deref(l.Spec.HolderIdentity, "")
	if h == t.reported {
		return
	}
	t.reported = h
	t.e.holder.Store(h)
	if h != "" && h != t.e.cfg.Identity {
		t.e.log.Info("standby: another exporter holds the lease", "lease", t.e.cfg.Namespace+"/"+t.e.cfg.Name, "holder", h)
	}
}
