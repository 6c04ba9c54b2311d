//go:build tools

// Package crds pins controller-gen and the prometheus-operator API whose
// ServiceMonitor and PrometheusRule CRDs generate.sh makes for the local
// node, so that deploy/components/prometheus-operator applies there.
package crds

import (
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
