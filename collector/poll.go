package collector

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
)

// PollResourceVersion teaches the RV clock without writing: every interval a
// list of the quiet ConfigMap (limit 1) returns the cluster's current RV.
// Passive mode needs it, since the exporter then writes nothing that would.
func PollResourceVersion(ctx context.Context, client kubernetes.Interface, ns, quiet string, interval time.Duration, hist *History, errLog *ratelog.Logger, now func() time.Time) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", quiet).String(), Limit: 1}
	for {
		l, err := client.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err == nil {
			var rv uint64
			if rv, err = owned.ParseRV(l.ResourceVersion); err == nil {
				hist.Observe(rv, now())
			}
		}
		if err != nil && ctx.Err() == nil {
			errLog.Error("poll", err, "cannot read the current resourceVersion (list configmaps, limit 1)", "namespace", ns)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
