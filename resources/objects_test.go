package resources

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/watchcache/watchcache-exporter/rvclock"
)

// TestObjectsRVDomains: a resource whose list RV lies between the two reads
// of the main etcd's RV teaches the main clock; one whose RV does not is
// another etcd's, timed by a clock of its own from then on, even when a
// later RV of it happens to fall between them; a round whose main RV cannot
// be read teaches no clock what it cannot place.
func TestObjectsRVDomains(t *testing.T) {
	rvs := map[string]string{"pods": "105", "events": "5000"}
	client := metadatafake.NewSimpleMetadataClient(runtime.NewScheme())
	client.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: rvs[a.GetResource().Resource]}}, nil
	})
	var current []uint64 // the main etcd's RVs, read in turn
	var currentErr error
	read := func(context.Context) (uint64, error) {
		if currentErr != nil {
			return 0, currentErr
		}
		rv := current[0]
		current = current[1:]
		return rv, nil
	}
	hist := rvclock.NewHistory(10)
	rs := []Resource{{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "events"}}
	o := NewObjects(client, rs, hist, read, prometheus.NewRegistry(), logr.Discard())

	current = []uint64{100, 110}
	o.round(t.Context())
	if newest, _, _ := hist.Clock.Newest(); newest != 105 {
		t.Errorf("main clock's newest RV %d, want pods' 105", newest)
	}
	if hist.Other("pods") || !hist.Other("events") {
		t.Errorf("other etcd: pods %v, events %v; want false, true", hist.Other("pods"), hist.Other("events"))
	}
	if newest, _, _ := clockOf(t, hist, "events").Newest(); newest != 5000 {
		t.Errorf("events' clock's newest RV %d, want 5000", newest)
	}
	if clockOf(t, hist, "pods") != hist.Clock {
		t.Error("pods are not timed by the main clock")
	}

	// events' next RV falls between the main etcd's by chance: still theirs.
	rvs["pods"], rvs["events"] = "125", "5020"
	current = []uint64{120, 5030}
	o.round(t.Context())
	if newest, _, _ := hist.Clock.Newest(); newest != 125 {
		t.Errorf("main clock's newest RV %d, want pods' 125", newest)
	}
	if newest, _, _ := clockOf(t, hist, "events").Newest(); newest != 5020 {
		t.Errorf("events' clock's newest RV %d, want 5020", newest)
	}

	// Without the main RV, pods' RV cannot be placed; events' still can.
	rvs["pods"], rvs["events"] = "99999", "5040"
	currentErr = errors.New("forbidden")
	o.round(t.Context())
	if newest, _, _ := hist.Clock.Newest(); newest != 125 {
		t.Errorf("main clock's newest RV %d after a round without the main RV, want 125 still", newest)
	}
	if newest, _, _ := clockOf(t, hist, "events").Newest(); newest != 5040 {
		t.Errorf("events' clock's newest RV %d, want 5040", newest)
	}
}

func clockOf(t *testing.T, hist *rvclock.History, resource string) *rvclock.Clock {
	t.Helper()
	c, ok := hist.ClockOf(resource)
	if !ok {
		t.Fatalf("%s: not placed in an etcd", resource)
	}
	return c
}

// The counts exist only while Objects runs: a standby's would be stale and
// doubled in a sum over the pods.
func TestObjectsOnlyWhileRunning(t *testing.T) {
	client := metadatafake.NewSimpleMetadataClient(runtime.NewScheme())
	client.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}, nil
	})
	reg := prometheus.NewRegistry()
	rs := []Resource{{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "events"}}
	o := NewObjects(client, rs, rvclock.NewHistory(10), func(context.Context) (uint64, error) { return 7, nil }, reg, logr.Discard())
	count := func() int {
		n, err := testutil.GatherAndCount(reg, "watchcache_resource_objects")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Errorf("%d series before Run, want none", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { o.Run(ctx, time.Hour); close(done) }()
	for count() < 2 { // Run's first round at once
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if n := count(); n != 0 {
		t.Errorf("%d series after Run ended, want none", n)
	}
}
