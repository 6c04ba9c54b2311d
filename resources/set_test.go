package resources

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
)

// A refresh takes what discovery says, also when a named resource is not
// served now, and keeps the set when discovery itself failed.
func TestSetRefresh(t *testing.T) {
	pods := Resource{Version: "v1", Resource: "pods"}
	widgets := Resource{Group: "example.com", Version: "v1", Resource: "widgets"}
	var next []Resource
	var nextErr error
	s := NewSet([]Resource{pods, widgets}, func(context.Context) ([]Resource, error) { return next, nextErr }, logr.Discard())
	names := func() []string { return Names(s.Current()) }

	next, nextErr = []Resource{pods}, errors.New("widgets.example.com: the apiserver serves no such resource")
	s.refresh(t.Context())
	if got := names(); len(got) != 1 || got[0] != "pods" {
		t.Errorf("widgets not served: %v, want pods alone", got)
	}
	next, nextErr = nil, errors.New("discovery: connection refused")
	s.refresh(t.Context())
	if got := names(); len(got) != 1 || got[0] != "pods" {
		t.Errorf("discovery failed: %v, want pods kept", got)
	}
	next, nextErr = []Resource{pods, widgets}, nil
	s.refresh(t.Context())
	if got := names(); len(got) != 2 {
		t.Errorf("widgets back: %v, want both", got)
	}
	if added, removed := Diff([]Resource{pods}, []Resource{widgets, pods}); len(added) != 1 || added[0] != widgets || len(removed) != 0 {
		t.Errorf("Diff: added %v, removed %v", added, removed)
	}
}
