//go:build tools

// Package prometheus pins the Prometheus 3 server and promtool that the tests
// run: the end-to-end test needs Kubernetes service discovery, which Debian's
// 2.42 is built without, and the dashboard and rule tests run on both.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
