//go:build tools

// Package kube pins the kube-apiserver main package so that go mod tidy keeps
// its dependencies.
package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
