package rvclock

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
)

// Poll teaches the clock without writing: every interval a list of the
// quiet ConfigMap (limit 1) returns the cluster's current RV. Passive mode
// needs it, since the exporter then writes nothing that would.
func Poll(ctx context.Context, client corev1client.ConfigMapsGetter, ns, quiet string, interval time.Duration, hist *History, errLog *ratelog.Logger) {
	opts := metav1.ListOptions{FieldSelector: owned.NameSelector(quiet), Limit: 1}
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		l, err := client.ConfigMaps(ns).List(ctx, opts)
		if err == nil {
			var rv uint64
			if rv, err = owned.ParseRV(l.ResourceVersion); err == nil {
				hist.Observe(rv, time.Now())
			}
		}
		if err != nil && ctx.Err() == nil {
			errLog.Error("poll", err, "cannot read the current resourceVersion (list configmaps, limit 1)", "namespace", ns)
		}
	}, interval)
}
