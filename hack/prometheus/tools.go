//go:build tools

// Package prometheus pins the Prometheus server that the end-to-end test runs:
// Debian's 2.42 is built without Kubernetes service discovery.
package prometheus

import _ "github.com/prometheus/prometheus/cmd/prometheus"
