//go:build tools

// Package gotestsum pins gotestsum, which make test runs the tests through: it
// keeps go test's JSON and reports the slowest tests.
package gotestsum

import _ "gotest.tools/gotestsum"
