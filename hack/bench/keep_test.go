package main

import "testing"

// A full run keeps the sections others wrote (section 8, by a test), and
// replaces its own.
func TestKeepOthers(t *testing.T) {
	old := "# Benchmarks\n\nold date\n\n## Summary\n\nold targets\n\n## 1. Load\n\nold 1\n\n## 7. Go\n\nold 7\n\n## 8. The LIST horizon\n\nby a test\n"
	report := "# Benchmarks\n\nnew date\n\n## Summary\n\nnew targets\n\n## 1. Load\n\nnew 1\n\n## 7. Go\n\nnew 7\n"
	want := report + "\n## 8. The LIST horizon\n\nby a test\n"
	if got := keepOthers(old, report); got != want {
		t.Errorf("keepOthers:\n%s\nwant:\n%s", got, want)
	}
	if got := keepOthers(old, want); got != want {
		t.Errorf("keepOthers of a report that has section 8:\n%s\nwant it as it was", got)
	}
}
