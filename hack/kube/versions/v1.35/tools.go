//go:build tools

// Package kube pins kube-apiserver v1.35.4 for make test-versions.
package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
