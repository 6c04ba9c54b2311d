package resources

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
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
	o := NewObjects(client, Fixed(rs), hist, read, prometheus.NewRegistry(), logr.Discard())

	current = []uint64{100, 110}
	o.round(t.Context(), rs)
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
	o.round(t.Context(), rs)
	if newest, _, _ := hist.Clock.Newest(); newest != 125 {
		t.Errorf("main clock's newest RV %d, want pods' 125", newest)
	}
	if newest, _, _ := clockOf(t, hist, "events").Newest(); newest != 5020 {
		t.Errorf("events' clock's newest RV %d, want 5020", newest)
	}

	// Without the main RV, pods' RV cannot be placed; events' still can.
	rvs["pods"], rvs["events"] = "99999", "5040"
	currentErr = errors.New("forbidden")
	o.round(t.Context(), rs)
	if newest, _, _ := hist.Clock.Newest(); newest != 125 {
		t.Errorf("main clock's newest RV %d after a round without the main RV, want 125 still", newest)
	}
	if newest, _, _ := clockOf(t, hist, "events").Newest(); newest != 5040 {
		t.Errorf("events' clock's newest RV %d, want 5040", newest)
	}
}

// A resource in an etcd of its own is listed for its clock between two
// rounds of counts, however far apart those are; the others are not.
func TestObjectsClockBetweenRounds(t *testing.T) {
	var mu sync.Mutex
	lists := map[string]int{}
	client := metadatafake.NewSimpleMetadataClient(runtime.NewScheme())
	client.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		r := a.GetResource().Resource
		lists[r]++
		rv := 105 // pods: between the main etcd's two reads
		if r == "events" {
			rv = 5000 + lists[r]
		}
		return true, &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(rv)}}, nil
	})
	hist := rvclock.NewHistory(10)
	rs := []Resource{{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "events"}}
	current := []uint64{100, 110}
	read := func(context.Context) (uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		rv := current[0]
		current = current[1:]
		return rv, nil
	}
	o := NewObjects(client, Fixed(rs), hist, read, prometheus.NewRegistry(), logr.Discard())
	o.every = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { o.Run(ctx, Pace{Interval: time.Hour}); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if c, ok := hist.ClockOf("events"); ok && hist.Other("events") {
			if newest, _, _ := c.Newest(); newest >= 5005 {
				break
			}
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if lists["pods"] != 1 || lists["events"] < 5 {
		t.Errorf("lists in one round an hour long: %v, want pods once and events 5 times or more", lists)
	}
}

func TestClockInterval(t *testing.T) {
	for _, tc := range []struct {
		n      int
		budget float64
		want   time.Duration
	}{
		{2, 5, 5 * time.Second},   // 0.4 of 1.25 requests/s
		{10, 5, 8 * time.Second},  // a quarter of the budget
		{10, 0, 5 * time.Second},  // no budget
		{0, 5, 5 * time.Second},   // none to list
		{40, 40, 5 * time.Second}, // 8 of 10 requests/s
	} {
		if got := clockInterval(ClockEvery, tc.n, tc.budget); got != tc.want {
			t.Errorf("clockInterval(%v, %d, %v) = %v, want %v", ClockEvery, tc.n, tc.budget, got, tc.want)
		}
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
	o := NewObjects(client, Fixed(rs), rvclock.NewHistory(10), func(context.Context) (uint64, error) { return 7, nil }, reg, logr.Discard())
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
	go func() { o.Run(ctx, Pace{Interval: time.Hour}); close(done) }()
	for count() < 2 { // Run's first round at once
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if n := count(); n != 0 {
		t.Errorf("%d series after Run ended, want none", n)
	}
}

// A resource that discovery no longer lists loses its series; a new one
// gets them, NaN until counted.
func TestObjectsFollowTheSet(t *testing.T) {
	client := metadatafake.NewSimpleMetadataClient(runtime.NewScheme())
	client.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetResource().Resource == "widgets" {
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("no"))
		}
		return true, &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}, nil
	})
	reg := prometheus.NewRegistry()
	o := NewObjects(client, Fixed(nil), rvclock.NewHistory(10), func(context.Context) (uint64, error) { return 7, nil }, reg, logr.Discard())
	pods := Resource{Version: "v1", Resource: "pods"}
	widgets := Resource{Group: "example.com", Version: "v1", Resource: "widgets"}
	gadgets := Resource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	series := func() []string {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				s := f.GetName()
				for _, l := range m.GetLabel() {
					s += " " + l.GetValue()
				}
				out = append(out, s)
			}
		}
		return out
	}
	o.round(t.Context(), []Resource{pods, widgets})
	want := []string{"watchcache_resource_objects  pods", "watchcache_resource_objects example.com widgets",
		"watchcache_resource_objects_errors_total example.com Forbidden widgets"}
	if got := series(); !sameSet(got, want) {
		t.Errorf("pods and widgets: %q, want %q", got, want)
	}
	o.round(t.Context(), []Resource{gadgets, pods})
	want = []string{"watchcache_resource_objects example.com gadgets", "watchcache_resource_objects  pods"}
	if got := series(); !sameSet(got, want) {
		t.Errorf("widgets gone, gadgets new: %q, want %q", got, want)
	}
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && sets.New(a...).Equal(sets.New(b...))
}

func TestPace(t *testing.T) {
	for _, tc := range []struct {
		pace Pace
		n    int
		want time.Duration
	}{
		{Pace{Interval: 10 * time.Second, Budget: 10}, 50, 10 * time.Second}, // 100 requests in 10 s
		{Pace{Interval: 10 * time.Second, Budget: 10}, 300, 60 * time.Second},
		{Pace{Interval: 10 * time.Second, Budget: 25}, 1000, 80 * time.Second},
		{Pace{Interval: 10 * time.Second}, 1000, 10 * time.Second}, // no budget
	} {
		if got := tc.pace.For(tc.n); got != tc.want {
			t.Errorf("%+v.For(%d) = %v, want %v", tc.pace, tc.n, got, tc.want)
		}
	}
}
