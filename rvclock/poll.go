package rvclock

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
)

// Poll teaches the clock without writing: every interval a list of the
// quiet ConfigMap (limit 1) returns the cluster's current RV. Passive mode
// needs it, since the exporter then writes nothing that would.
func Poll(ctx context.Context, client kube.ConfigMapsGetter, ns, quiet string, interval time.Duration, hist *History, errLog *ratelog.Logger) {
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		rv, err := CurrentRV(ctx, client, ns, quiet)
		if err == nil {
			hist.Observe(rv, time.Now())
		}
		if err != nil && ctx.Err() == nil {
			errLog.Error("poll", err, "cannot read the current resourceVersion (list configmaps, limit 1)", "namespace", ns)
		}
	}, interval)
}

// CurrentRV is the main etcd's current RV (the ConfigMaps'): the RV of a
// list of the quiet ConfigMap, limit 1. Such a list is a consistent read: its
// RV is at least etcd's revision when it was sent, and at most when answered.
func CurrentRV(ctx context.Context, client kube.ConfigMapsGetter, ns, quiet string) (uint64, error) {
	l, err := client.ConfigMaps(ns).List(ctx, metav1.ListOptions{FieldSelector: owned.NameSelector(quiet), Limit: 1})
	if err != nil {
		return 0, err
	}
	return owned.ParseRV(l.ResourceVersion)
}
