// Package promopts holds the metric options every package of the exporter
// shares: the name prefix, the shape of its histograms, and the values of
// its "reason" labels.
package promopts

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Namespace is the prefix of every series: watchcache_.
const Namespace = "watchcache"

// Histogram is classic with buckets and native (factor 1.1) at once, so that
// Prometheus servers with and without native histograms both resolve the
// interesting range.
func Histogram(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Namespace:                       Namespace,
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

// Gauge is a gauge's options.
func Gauge(name, help string) prometheus.GaugeOpts {
	return prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}
}

// Counter is a counter's options.
func Counter(name, help string) prometheus.CounterOpts {
	return prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}
}

// Reason is the value of a "reason" label: err's Kubernetes status reason
// (Forbidden, NotFound, TooManyRequests, ...), CacheInitializing for the 429
// of a watch cache that is (re)initialising, or Unknown.
func Reason(err error) string {
	if apierrors.IsTooManyRequests(err) && strings.Contains(err.Error(), "storage is (re)initializing") {
		return "CacheInitializing"
	}
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	return "Unknown"
}
