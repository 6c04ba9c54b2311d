package resources_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/test/arrivals"
	"github.com/watchcache/watchcache-exporter/test/browser"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

const ns = "resources-test"

// Rates of the test's own writes: leases fast enough that their cache
// doubles four times (100 -> 1600), pods and ConfigMaps at other rates, and
// events, in an etcd of their own, faster than all of them together, after
// a head start: their RVs run ahead of the main etcd's and stay there.
const (
	leaseRate     = 20.0
	podRate       = 8.0
	configMapRate = 10.0
	eventRate     = 50.0
	eventsAhead   = 2000
	objects       = 4
)

// TestEveryResourceWindow writes leases, pods, ConfigMaps and events at
// their own rates, events in an etcd of their own, while a passive exporter
// measures every resource's window: each must match the apiserver's own
// capacity over that resource's write rate (the events the test's own
// watch of it received in the window) within 2%, the ConfigMaps' within 1%. Each etcd
// is an RV domain of its own: events' RVs say nothing of when the main
// etcd's were written, and the reverse. Secrets have their cache off, so etcd's
// compaction bounds their window: the exporter must say so and find etcd's
// compaction revision. Object counts must match the apiserver's lists.
func TestEveryResourceWindow(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{EventsEtcd: true, APIServerFlags: []string{
		// Events have no watch cache by default; theirs is on here, so that
		// its window is measured against capacity/rate as the others'.
		"--watch-cache-sizes=secrets#0,events#100",
		// Compactions every 30 s instead of 5 min, so that one happens
		// within the test.
		"--etcd-compaction-interval=30s",
	}})
	ctx := t.Context()
	cfg := c.AdminConfig()
	cfg.QPS = -1
	admin := kubernetes.NewForConfigOrDie(cfg)
	setup(t, admin)
	a := c.APIServer()

	exp := exportertest.Start(t, c.AdminConfig(), "--namespace="+ns, "--load.rate=0",
		"--resources=pods,leases.coordination.k8s.io,secrets,events", "--resources.interval=2s")
	exp.WaitReady(t, time.Minute)
	// A second passive exporter, in a namespace of its own, measures events
	// alone, one round every slowRound: longer than their window, as a
	// round of hundreds of resources within the budget is. Had events'
	// clock learnt only from the rounds' counts, at the second round it would
	// know no RV as young as the cache's oldest (the window NaN) or date it
	// across the head start's burst. Its window must agree with the first's.
	const slowRound = 200 * time.Second
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-slow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slowStart := time.Now()
	slow := exportertest.Start(t, c.AdminConfig(), "--namespace="+ns+"-slow", "--load.rate=0",
		"--resources=events", fmt.Sprintf("--resources.interval=%s", slowRound))
	slow.WaitReady(t, time.Minute)

	// The test's own watch of each resource, from before the writers start.
	watched := []string{"leases", "pods", "configmaps", "events"}
	received := map[string]*arrivals.Log{}
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, r := range watched {
		gvr := schema.GroupVersionResource{Version: "v1", Resource: r}
		if r == "leases" {
			gvr.Group = "coordination.k8s.io"
		}
		received[r] = arrivals.Watch(t, dyn.Resource(gvr))
	}

	var leaseWrites, podWrites, configMapWrites, eventWrites atomic.Int64
	writeCtx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	patchEvent := func(ctx context.Context, i int) error {
		_, err := admin.CoreV1().Events(ns).Patch(ctx, fmt.Sprintf("event-%d", i%objects), types.MergePatchType,
			fmt.Appendf(nil, `{"count":%d}`, i+1), metav1.PatchOptions{})
		return err
	}
	for i := range eventsAhead {
		if err := patchEvent(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	go write(writeCtx, t, eventRate, &eventWrites, patchEvent)
	go write(writeCtx, t, configMapRate, &configMapWrites, func(ctx context.Context, i int) error {
		_, err := admin.CoreV1().ConfigMaps(ns).Patch(ctx, fmt.Sprintf("cm-%d", i%objects), types.MergePatchType,
			fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i), metav1.PatchOptions{})
		return err
	})
	go write(writeCtx, t, leaseRate, &leaseWrites, func(ctx context.Context, i int) error {
		_, err := admin.CoordinationV1().Leases(ns).Patch(ctx, fmt.Sprintf("lease-%d", i%objects), types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"renewTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")), metav1.PatchOptions{})
		return err
	})
	go write(writeCtx, t, podRate, &podWrites, func(ctx context.Context, i int) error {
		_, err := admin.CoreV1().Pods(ns).Patch(ctx, fmt.Sprintf("pod-%d", i%objects), types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{"n":"%d"}}}`, i), metav1.PatchOptions{})
		return err
	})

	type sample struct {
		at                time.Time // when the exporter was scraped
		window, capacity  map[string]float64
		lower, cacheOn    map[string]float64
		full              map[string]bool // the cache surely held its capacity
		slow, slowLower   float64         // events' window by the slow exporter
		oldestSecrets     float64
		compactedRevision float64
		eventsRevision    float64 // the events' etcd's current revision
		mainRevision      float64 // the main etcd's current revision
	}
	var samples []sample
	start := time.Now()
	// held[r] is a lower bound on the events r's cache holds at the last
	// sample, from the test's own watch; full[r] counts the samples past
	// steadyAfter at which it surely held its capacity. A cache that grows
	// keeps what it held and fills up with what comes after: until then its
	// window is shorter than capacity over rate, and rightly so (cold run 8:
	// events at 40/s filled 3200 more after a doubling to 6400 for 80 s).
	// The samples go on, up to a limit, until each has 5 such.
	const total, steadyAfter, limit = 210 * time.Second, 140 * time.Second, 300 * time.Second
	held, full := map[string]float64{}, map[string]int{}
	enough := func() bool {
		for _, r := range watched {
			if full[r] < 5 {
				return false
			}
		}
		return true
	}
	slowSecond := func() bool { return time.Since(slowStart) > slowRound+20*time.Second }
	for time.Since(start) < total || (!enough() || !slowSecond()) && time.Since(start) < limit {
		time.Sleep(5 * time.Second)
		// The exporter's windows hold from its last probe; the scrape's
		// midpoint is when they are compared with the watches' counts.
		t0 := time.Now()
		m := exp.Scrape(t)
		s := sample{at: t0.Add(time.Since(t0) / 2), window: map[string]float64{}, capacity: map[string]float64{},
			lower: map[string]float64{}, cacheOn: map[string]float64{}, full: map[string]bool{}}
		fams, err := a.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range watched {
			s.window[r] = m.Value(t, "watchcache_window_seconds", "resource", r)
			s.lower[r] = m.Value(t, "watchcache_window_lower_bound", "resource", r)
			s.cacheOn[r] = 1 // the quiet ConfigMap's probes measure configmaps: their cache is on when they have a window
			if r != "configmaps" {
				s.cacheOn[r] = m.Value(t, "watchcache_resource_watch_cache_enabled", "resource", r)
			}
			if s.capacity[r], err = testcluster.Value(fams, "watch_cache_capacity", map[string]string{"resource": r}); err != nil {
				t.Fatal(err)
			}
		}
		ms := slow.Scrape(t)
		s.slow = ms.Value(t, "watchcache_window_seconds", "resource", "events")
		s.slowLower = ms.Value(t, "watchcache_window_lower_bound", "resource", "events")
		eventsEtcd, err := c.EventsEtcdMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.eventsRevision, err = testcluster.Value(eventsEtcd, "etcd_debugging_mvcc_current_revision", nil); err != nil {
			t.Fatal(err)
		}
		s.cacheOn["secrets"] = m.Value(t, "watchcache_resource_watch_cache_enabled", "resource", "secrets")
		s.oldestSecrets = m.Value(t, "watchcache_oldest_resource_version", "resource", "secrets")
		etcd, err := c.EtcdMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.compactedRevision, err = testcluster.Value(etcd, "etcd_debugging_mvcc_compact_revision", nil); err != nil {
			t.Fatal(err)
		}
		if s.mainRevision, err = testcluster.Value(etcd, "etcd_debugging_mvcc_current_revision", nil); err != nil {
			t.Fatal(err)
		}
		for _, r := range watched {
			switch {
			case len(samples) == 0:
				held[r] = 0 // the capacity before is not known
			case s.capacity[r] == samples[len(samples)-1].capacity[r]:
				held[r] = min(s.capacity[r], held[r]+float64(received[r].Count(samples[len(samples)-1].at, s.at)))
			default: // resized: what it held, at most the new capacity
				held[r] = min(s.capacity[r], held[r])
			}
			s.full[r] = held[r] >= s.capacity[r]
			if s.full[r] && s.at.Sub(start) >= steadyAfter {
				full[r]++
			}
		}
		samples = append(samples, s)
	}
	// The status page of a passive exporter: it plots the cluster's write
	// rate (the exporter writes nothing) and lists every measured resource.
	shot := ""
	if os.Getenv(browser.UpdateDocsEnv) == "1" {
		shot = filepath.Join("..", "docs", "status-page-passive.png")
	}
	page := browser.CheckStatusPage(t, exp.Addr, shot)
	if !strings.Contains(page.About, "mode: passive") || !strings.Contains(page.About, "leader") {
		t.Errorf("status page says %q, want passive mode and leader", page.About)
	}
	for _, r := range []string{"configmaps", "pods", "leases.coordination.k8s.io", "secrets", "events"} {
		if !slices.Contains(page.Resources, r) {
			t.Errorf("status page lists %v, without %s", page.Resources, r)
		}
	}
	stopWrites()
	t.Logf("writes: %d leases (%.1f/s asked), %d pods (%.1f/s asked), %d ConfigMaps (%.1f/s asked), %d events (%.1f/s asked, after %d) in %s",
		leaseWrites.Load(), leaseRate, podWrites.Load(), podRate, configMapWrites.Load(), configMapRate,
		eventWrites.Load(), eventRate, eventsAhead, time.Since(start).Round(time.Second))

	// The premise: events' RVs (their etcd's revisions) ran ahead of the
	// main etcd's, where a single RV clock would follow them.
	last := samples[len(samples)-1]
	t.Logf("current RVs: events' etcd %v, the main etcd %v", last.eventsRevision, last.mainRevision)
	if last.eventsRevision <= last.mainRevision {
		t.Fatalf("events' RV %v is not ahead of the main etcd's %v: the test's premise does not hold", last.eventsRevision, last.mainRevision)
	}

	// Each resource's window against capacity over its write rate: the
	// events the test's own watch of the resource received in the window
	// (every writer's, the exporter's and the apiserver's included), each
	// stamped when it arrived, over the window. No counter sampled every few
	// seconds and interpolated: on a busy machine its reads take seconds and
	// its rate wobbled by more than 1% at a steady 10 writes/s.
	for _, r := range watched {
		checked := 0
		for _, s := range samples {
			if s.at.Sub(start) < steadyAfter || !s.full[r] {
				continue
			}
			if !(s.window[r] > 0) {
				t.Errorf("%s at %s: window %v s, want a positive number", r, s.at.Sub(start).Round(time.Second), s.window[r])
				continue
			}
			n := received[r].Count(s.at.Add(-time.Duration(s.window[r]*float64(time.Second))), s.at)
			rate := float64(n) / s.window[r]
			want := s.capacity[r] / rate
			tolerance := 0.02
			if r == "configmaps" {
				tolerance = 0.01
			}
			msg := fmt.Sprintf("%s at %s: window %.2f s, capacity %v / %.2f events/s (%d received in it) = %.2f s (lower bound %v, cache %v)",
				r, s.at.Sub(start).Round(time.Second), s.window[r], s.capacity[r], rate, n, want, s.lower[r], s.cacheOn[r])
			if math.Abs(s.window[r]-want) > tolerance*want || s.lower[r] != 0 || s.cacheOn[r] != 1 {
				t.Error(msg)
			} else {
				t.Log(msg)
			}
			checked++
		}
		if checked < 5 {
			t.Errorf("%s: %d steady samples checked, want 5 or more", r, checked)
		}
	}
	// The slow exporter's events window from its second round: the first
	// sample where it changed, against the first exporter's of that sample
	// (probed at most 2 s apart, the window moving well under 1% a second).
	secondRound := false
	for i, s := range samples {
		if i == 0 || s.at.Sub(slowStart) < slowRound || sameFloat(s.slow, samples[i-1].slow) {
			continue
		}
		secondRound = true
		msg := fmt.Sprintf("events' window at %s: %.2f s measured every %s (lower bound %v), %.2f s every 2 s",
			s.at.Sub(start).Round(time.Second), s.slow, slowRound, s.slowLower, s.window["events"])
		if !(s.slow > 0) || s.slowLower != 0 || math.Abs(s.slow-s.window["events"]) > 0.02*s.window["events"] {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
		break
	}
	if !secondRound {
		t.Errorf("the slow exporter's events window never changed after %s (its second round)", slowRound)
	}

	if first := samples[0]; last.capacity["leases"] <= first.capacity["leases"] || last.capacity["leases"] == 100 {
		t.Errorf("leases' cache capacity %v -> %v: it never doubled", first.capacity["leases"], last.capacity["leases"])
	}
	if last.capacity["leases"] == last.capacity["pods"] {
		t.Errorf("leases and pods ended with the same capacity %v: not two different sizes", last.capacity["pods"])
	}

	// Secrets: the cache is off; their oldest RV is etcd's compaction.
	// Once etcd has compacted, RV 1 is refused by etcd: the exporter must
	// say so by the next sample (5 s later, two probe intervals); before,
	// RV 1 is served and it cannot tell. Never 1: the cache is off.
	compacted := false
	for i, s := range samples {
		on := s.cacheOn["secrets"]
		if on == 1 || i > 0 && samples[i-1].compactedRevision > 0 && on != 0 {
			t.Errorf("secrets at %s: watch_cache_enabled %v, want 0 (etcd compacted at %v, and at %v 5 s before)",
				s.at.Sub(start).Round(time.Second), on, s.compactedRevision, samples[max(i-1, 0)].compactedRevision)
		}
		compacted = compacted || s.compactedRevision > 0
	}
	if !compacted {
		t.Fatal("etcd never compacted during the test")
	}
	exp.WaitFor(t, 30*time.Second, "secrets' oldest RV at etcd's compaction", func(m exportertest.Metrics) bool {
		etcd, err := c.EtcdMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rev, _ := testcluster.Value(etcd, "etcd_debugging_mvcc_compact_revision", nil)
		oldest := m.Value(t, "watchcache_oldest_resource_version", "resource", "secrets")
		t.Logf("secrets: oldest RV %v, etcd compacted at %v, window %v s", oldest, rev,
			m.Value(t, "watchcache_window_seconds", "resource", "secrets"))
		return oldest == rev-1
	})

	// Object counts against the apiserver's lists.
	exp.WaitFor(t, 30*time.Second, "object counts equal to the lists", func(m exportertest.Metrics) bool {
		pods, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leases, err := admin.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		secrets, err := admin.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for r, n := range map[string]int{"pods": len(pods.Items), "leases": len(leases.Items), "secrets": len(secrets.Items)} {
			got := m.Value(t, "watchcache_resource_objects", "resource", r)
			t.Logf("%s: %v objects counted, %d listed", r, got, n)
			ok = ok && got == float64(n)
		}
		return ok
	})
}

// sameFloat is a == b, NaN equal to NaN.
func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// setup makes the namespace and the objects the writers patch.
func setup(t *testing.T, admin kubernetes.Interface) {
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	// Admission looks the pods' ServiceAccount up; no controller makes it here.
	must(admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}))
	no := false
	for i := range objects {
		must(admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lease-%d", i)}}, metav1.CreateOptions{}))
		must(admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i)},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: &no,
				Containers: []corev1.Container{{Name: "c", Image: "localhost/never-pulled:1"}}},
		}, metav1.CreateOptions{}))
		must(admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%d", i)}}, metav1.CreateOptions{}))
		must(admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}))
		must(admin.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("event-%d", i)},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("pod-%d", i)},
			Reason:         "Test", Message: "written by the test", Type: corev1.EventTypeNormal}, metav1.CreateOptions{}))
	}
}

// write calls fn at rate per second until ctx ends, counting successes.
func write(ctx context.Context, t *testing.T, rate float64, n *atomic.Int64, fn func(context.Context, int) error) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := fn(ctx, i); err != nil {
			if ctx.Err() == nil {
				t.Errorf("write: %v", err)
			}
			return
		}
		n.Add(1)
	}
}

// TestResourcesAtStart: without the ClusterRole, the exporter stops at
// start with an error that names each resource and verb; a resource served
// without list and watch is named too. One not served yet is measured once
// it is, and dropped once gone.
// With all, every resource discovery lists with list and watch is measured,
// its watch cache on.
func TestResourcesAtStart(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Everything in its namespace, as deploy/base's Role and more, but no
	// ClusterRole.
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"", "coordination.k8s.io"}, Resources: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "all"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "exporter", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := c.ServiceAccountConfig(ctx, ns, "exporter")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		cfg  bool // as the ServiceAccount, else as admin
		want string
	}{
		{[]string{"--resources=pods,leases.coordination.k8s.io"}, true,
			"RBAC denies list pods cluster-wide; watch pods cluster-wide; list leases.coordination.k8s.io cluster-wide; watch leases.coordination.k8s.io cluster-wide"},
		{[]string{"--resources=all"}, true, "--resources: --resources=all: list apiservices.apiregistration.k8s.io"},
		{[]string{"--resources=bindings"}, false, "--resources: bindings: served without list and watch"},
	} {
		cfg := c.AdminConfig()
		if tc.cfg {
			cfg = sa
		}
		code, logs := exportertest.RunToExit(t, cfg, append([]string{"--namespace=" + ns, "--load.rate=0"}, tc.args...)...)
		if code != 1 || !strings.Contains(logs, tc.want) {
			t.Errorf("%v: exit %d, log:\n%s\nwant exit 1 and %q", tc.args, code, logs, tc.want)
		}
	}

	// A CRD not installed yet is no reason to stop (a crash loop until it
	// is): the exporter says so, measures it once discovery lists it, and
	// drops its series at the first probe that finds it gone, before
	// discovery is read again.
	late := "lates"
	const rediscover = 30 * time.Second
	lateExp := exportertest.Start(t, c.AdminConfig(), "--namespace="+ns, "--load.rate=0", "--resources=pods,"+late+"."+crdGroup,
		"--resources.interval=2s", "--resources.rediscover="+rediscover.String())
	lateExp.WaitReady(t, time.Minute)
	lateWindow := func(m exportertest.Metrics) (float64, bool) {
		v, err := m.Get("watchcache_window_seconds", "group", crdGroup, "resource", late)
		return v, err == nil
	}
	if _, ok := lateWindow(lateExp.Scrape(t)); ok || !strings.Contains(lateExp.Logs(), "not served now") {
		t.Errorf("%s before its CRD: a window series (%v), or no log line says it is not served:\n%s", late, ok, lateExp.Logs())
	}
	dyn := dynamic.NewForConfigOrDie(c.AdminConfig())
	created := time.Now()
	createCRD(t, dyn, late)
	lateExp.WaitFor(t, rediscover+time.Minute, late+" measured once its CRD is served", func(m exportertest.Metrics) bool {
		v, ok := lateWindow(m)
		return ok && !math.IsNaN(v)
	})
	t.Logf("%s measured %s after its CRD was created (--resources.rediscover=%s)", late, time.Since(created).Round(time.Second), rediscover)
	deleted := time.Now()
	if err := dyn.Resource(testcluster.CRDs).Delete(ctx, late+"."+crdGroup, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lateExp.WaitFor(t, rediscover+time.Minute, late+"'s series dropped once its CRD is gone", func(m exportertest.Metrics) bool {
		_, ok := lateWindow(m)
		return !ok
	})
	t.Logf("%s's series dropped %s after its CRD was deleted", late, time.Since(deleted).Round(100*time.Millisecond))
	if !strings.Contains(lateExp.Logs(), "a resource is no longer served") {
		t.Error("the series were dropped by a reading of discovery, not by the probe that found the resource gone")
	}
	lateExp.Stop(t)

	// What kubectl api-resources --verbs=list,watch lists, configmaps
	// left out: the quiet ConfigMap's probes measure them, with the labels
	// group="" and resource="configmaps".
	lists, err := admin.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			if slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
				want[gv.Group+"/"+r.Name] = true
			}
		}
	}
	exp := exportertest.Start(t, c.AdminConfig(), "--namespace="+ns, "--load.rate=0", "--resources=all", "--resources.interval=2s")
	// A window needs two rounds (the first object count places each
	// resource's clock), each stretched to the default budget of 5
	// requests/s: given a minute more than that, as a busy machine takes.
	ivl := resources.Pace{Interval: 2 * time.Second, Budget: 5}.For(len(want))
	exp.WaitFor(t, 2*ivl+time.Minute, "every resource's window", func(m exportertest.Metrics) bool {
		got := map[string]bool{}
		finite := 0
		var none []string
		for _, x := range m["watchcache_window_seconds"].GetMetric() {
			var g, r string
			for _, l := range x.GetLabel() {
				switch l.GetName() {
				case "group":
					g = l.GetValue()
				case "resource":
					r = l.GetValue()
				}
			}
			got[g+"/"+r] = true
			if v := x.GetGauge().GetValue(); !math.IsNaN(v) && v > 0 {
				finite++
			} else {
				none = append(none, fmt.Sprintf("%s/%s=%v", g, r, v))
			}
			if on, err := m.Get("watchcache_resource_watch_cache_enabled", "group", g, "resource", r); err == nil && on != 1 && !math.IsNaN(on) {
				t.Errorf("%s/%s: watch_cache_enabled %v, want 1", g, r, on)
			}
		}
		if !maps.Equal(got, want) {
			t.Logf("measured %d resources, discovery lists %d", len(got), len(want))
			return false
		}
		t.Logf("%d resources measured, %d with a window; without: %v", len(got), finite, none)
		return finite == len(got)
	})
	exp.CheckMetrics(t)
}
