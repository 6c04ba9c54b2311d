package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/internal/leader"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/test/arrivals"
	"github.com/watchcache/watchcache-exporter/test/blackhole"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

func TestMain(m *testing.M) { os.Exit(exportertest.Main(m)) }

// faultNS is the namespace of deploy/'s manifests, whose RBAC and APF
// objects the fault matrix uses as they are.
const faultNS = "watchcache-exporter"

// fault is one run against the real control plane: what broke, and how long
// the exporter took to say so and to recover.
type fault struct {
	t                *testing.T
	start            time.Time
	detect, recovery time.Duration
}

func begin(t *testing.T) *fault { return &fault{t: t, start: time.Now()} }

func (f *fault) detected()  { f.detect = time.Since(f.start) }
func (f *fault) recovered() { f.recovery = time.Since(f.start) }

func (f *fault) report() {
	f.t.Logf("fault %q: detected after %s, recovered after %s", f.t.Name(), f.detect.Round(100*time.Millisecond), f.recovery.Round(100*time.Millisecond))
}

// TestFaults is the fault matrix: each fault an operator will meet, on a
// real apiserver and etcd, with the exporter under deploy/'s RBAC. Each
// asserts that the exporter says so (metric, log, readiness) and recovers,
// and at the end that nothing of the exporter is left: no goroutine of the
// in-process exporters, no ConfigMap, no Lease. It has its test binary to
// itself (the other tests here are hermetic, and none runs beside it), so
// that goleak sees only its goroutines.
func TestFaults(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{
		// Few seats in all, so that a priority level of one share has one
		// seat, and the load's patches beyond it are refused with 429.
		APIServerFlags: []string{"--max-requests-inflight=20", "--max-mutating-requests-inflight=10"},
	})
	leaks := goleak.IgnoreCurrent()
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	cms := admin.CoreV1().ConfigMaps(faultNS)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: faultNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := readYAML[rbacv1.Role](t, "../deploy/base/role.yaml")
	role.Namespace = faultNS
	if _, err := admin.RbacV1().Roles(faultNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := readYAML[rbacv1.RoleBinding](t, "../deploy/base/rolebinding.yaml")
	rb.Namespace = faultNS
	for i := range rb.Subjects {
		rb.Subjects[i].Namespace = faultNS
	}
	if _, err := admin.RbacV1().RoleBindings(faultNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := c.ServiceAccountConfig(ctx, faultNS, "watchcache-exporter")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--namespace=" + faultNS, "--load.rate=20"}
	e := exportertest.StartReady(t, sa, args...)
	e.WaitFor(t, 30*time.Second, "load and a first touch", func(m exportertest.Metrics) bool {
		return m.Value(t, "watchcache_load_writes_total", "result", "ok") > 0 && m.Value(t, "watchcache_quiet_touches_total") > 0
	})

	t.Run("quiet deleted", func(t *testing.T) {
		f := begin(t)
		before := e.Scrape(t).Value(t, "watchcache_quiet_recreations_total")
		if err := cms.Delete(ctx, "watchcache-quiet", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.WaitFor(t, 30*time.Second, "quiet recreated", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_quiet_recreations_total") > before
		})
		f.detected()
		cm, err := cms.Get(ctx, "watchcache-quiet", metav1.GetOptions{})
		if err != nil || cm.Annotations[owned.OwnerAnnotation] != faultNS+"/watchcache-quiet" {
			t.Errorf("quiet after its recreation: %v, annotations %v", err, cm.Annotations)
		}
		e.WaitReady(t, 30*time.Second)
		f.recovered()
		wantLog(t, e, "the quiet ConfigMap was missing: created it again")
		f.report()
	})

	t.Run("noise deleted", func(t *testing.T) {
		f := begin(t)
		m0 := e.Scrape(t)
		if err := cms.Delete(ctx, "watchcache-noise-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.WaitFor(t, 30*time.Second, "a failed write to the deleted noise object", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_load_writes_total", "result", "error") > m0.Value(t, "watchcache_load_writes_total", "result", "error")
		})
		f.detected()
		waitOwned(t, cms, "watchcache-noise-0", 30*time.Second)
		m1 := e.Scrape(t)
		e.WaitFor(t, 30*time.Second, "writes to noise-0 again", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_load_writes_total", "result", "ok") > m1.Value(t, "watchcache_load_writes_total", "result", "ok")+20
		})
		f.recovered()
		wantLog(t, e, "noise patch failed")
		f.report()
	})

	t.Run("quiet marks removed", func(t *testing.T) {
		f := begin(t)
		taken := takeMarks(t, cms, "watchcache-quiet")
		waitLost(t, e, taken.Name)
		f.detected()
		wantLog(t, e, "ConfigMap lost the exporter's marks")
		time.Sleep(5 * time.Second) // probes and touch attempts go on meanwhile
		wantUnwritten(t, cms, taken)
		giveMarksBack(t, cms, taken)
		e.WaitFor(t, 30*time.Second, "quiet the exporter's again", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_exporter_objects_lost") == 0 && e.Ready()
		})
		f.recovered()
		f.report()
	})

	t.Run("noise marks removed, then noise deleted", func(t *testing.T) {
		f := begin(t)
		taken := takeMarks(t, cms, "watchcache-noise-1")
		waitLost(t, e, taken.Name)
		f.detected()
		// The load goes on over the other noise objects, never the one taken.
		ok0 := e.Scrape(t).Value(t, "watchcache_load_writes_total", "result", "ok")
		e.WaitFor(t, 30*time.Second, "50 more writes over the other noise objects", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_load_writes_total", "result", "ok") > ok0+50
		})
		wantUnwritten(t, cms, taken)
		if err := cms.Delete(ctx, taken.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.WaitFor(t, 45*time.Second, "noise-1 recreated and the exporter's again", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_exporter_objects_lost") == 0 && e.Ready()
		})
		waitOwned(t, cms, taken.Name, 5*time.Second)
		f.recovered()
		f.report()
	})

	t.Run("RBAC rule revoked and restored", func(t *testing.T) {
		for _, tc := range []struct {
			verb, resource string
			broken         func(before, now exportertest.Metrics) bool
			fixed          func(before, now exportertest.Metrics) bool
		}{
			{"patch", "configmaps",
				func(b, m exportertest.Metrics) bool {
					return grew(t, b, m, 5, "watchcache_load_writes_total", "result", "error")
				},
				func(b, m exportertest.Metrics) bool {
					return grew(t, b, m, 20, "watchcache_load_writes_total", "result", "ok")
				}},
			{"list", "configmaps",
				func(b, m exportertest.Metrics) bool {
					return grew(t, b, m, 2, "watchcache_reconnects_total", "from", "bookmark", "result", "error")
				},
				func(b, m exportertest.Metrics) bool {
					return grew(t, b, m, 2, "watchcache_reconnects_total", "from", "bookmark", "result", "ok")
				}},
			{"update", "leases",
				func(_, m exportertest.Metrics) bool { return m.Value(t, "watchcache_exporter_leader") == 0 },
				func(b, m exportertest.Metrics) bool {
					return m.Value(t, "watchcache_exporter_leader") == 1 && grew(t, b, m, 20, "watchcache_load_writes_total", "result", "ok")
				}},
		} {
			t.Run(tc.verb+" "+tc.resource, func(t *testing.T) {
				f := begin(t)
				i := slices.IndexFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
					return slices.Contains(r.Verbs, tc.verb) && slices.Contains(r.Resources, tc.resource)
				})
				reduced := role.DeepCopy()
				reduced.Rules = slices.Delete(reduced.Rules, i, i+1)
				updateRole(t, admin, reduced)
				before := e.Scrape(t)
				e.WaitFor(t, leader.RenewDeadline+2*leader.RetryPeriod+10*time.Second, "the denial counted", func(m exportertest.Metrics) bool { return tc.broken(before, m) })
				f.detected()
				if tc.resource == "leases" {
					// Without the Lease, nothing is written.
					m0 := e.Scrape(t)
					time.Sleep(3 * time.Second)
					if m1 := e.Scrape(t); m1.Value(t, "watchcache_load_writes_total", "result", "ok") != m0.Value(t, "watchcache_load_writes_total", "result", "ok") {
						t.Error("writes go on without the Lease")
					}
				}
				updateRole(t, admin, role)
				mid := e.Scrape(t)
				e.WaitFor(t, 60*time.Second, "recovery once the rule is back", func(m exportertest.Metrics) bool { return tc.fixed(mid, m) })
				e.WaitReady(t, 60*time.Second)
				f.recovered()
				f.report()
			})
		}
		wantLog(t, e, "forbidden")
	})

	// The apiserver unavailable for longer than the renew deadline (its
	// start takes ~15 s more), the holder stops and leads again once it is
	// back; an ordinary restart (~15 s, TestArticleOnRealPrometheus) keeps the Lease.
	for _, outage := range []time.Duration{30 * time.Second, 3 * time.Minute} {
		t.Run(fmt.Sprintf("apiserver down %s", outage), func(t *testing.T) {
			before := e.Scrape(t)
			logsBefore := strings.Count(e.Logs(), "\n")
			stopAt := time.Now()
			if err := c.APIServer().Stop(); err != nil { // graceful: ~15 s
				t.Fatal(err)
			}
			f := begin(t) // gone from here
			e.WaitFor(t, 15*time.Second, "failed writes counted", func(m exportertest.Metrics) bool {
				return grew(t, before, m, 0, "watchcache_load_writes_total", "result", "error")
			})
			f.detected()
			leading := true
			for time.Now().Before(stopAt.Add(outage)) {
				if m, err := e.TryScrape(); err == nil && m.Value(t, "watchcache_exporter_leader") == 0 {
					leading = false
				}
				time.Sleep(time.Second)
			}
			lines := strings.Count(e.Logs(), "\n") - logsBefore
			if err := c.APIServer().Start(ctx); err != nil {
				t.Fatal(err)
			}
			f.start = time.Now() // recovery counts from the apiserver's return
			back := e.Scrape(t)
			e.WaitFor(t, 90*time.Second, "leading, writing, probing and touching again", func(m exportertest.Metrics) bool {
				// A new holder's collectors count from 0.
				touched := grew(t, before, m, 0, "watchcache_quiet_touches_total") || grew(t, back, m, 0, "watchcache_quiet_touches_total")
				return m.Value(t, "watchcache_exporter_leader") == 1 && touched &&
					grew(t, back, m, 20, "watchcache_load_writes_total", "result", "ok") &&
					grew(t, back, m, 2, "watchcache_reconnects_total", "from", "stale", "result", "ok")
			})
			e.WaitReady(t, 60*time.Second)
			f.recovered()
			t.Logf("Lease kept through the outage: %v", leading)
			if !leading {
				wantLog(t, e, "lost the lease: stopped writing and measuring")
			}
			// Retries back off, and their logs are rate-limited: no hot loop.
			t.Logf("%d log lines during the %s outage", lines, outage)
			if perMin := float64(lines) / outage.Minutes(); perMin > 60 {
				t.Errorf("%d log lines in %s: %.0f a minute, want at most 60", lines, outage, perMin)
			}
			f.report()
		})
	}

	t.Run("etcd restart", func(t *testing.T) {
		f := begin(t)
		before := e.Scrape(t)
		if err := c.RestartEtcd(ctx); err != nil {
			t.Fatal(err)
		}
		f.detected() // the restart takes what it takes; the exporter need not see it
		e.WaitFor(t, 90*time.Second, "writing after etcd's restart", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_exporter_leader") == 1 &&
				grew(t, before, m, 20, "watchcache_load_writes_total", "result", "ok")
		})
		e.WaitReady(t, 60*time.Second)
		f.recovered()
		f.report()
	})

	// Before the load of 200 writes/s below: writes right after it would
	// grow the apiserver's cache past what the takeover test's wait allows.
	t.Run("a flow-control level that rejects the probes", func(t *testing.T) {
		// A level with no seats that rejects, and a schema ahead of every
		// other that sends it the exporter's watches: each probe and watch
		// of the measurement is answered 429 at once.
		fc := admin.FlowcontrolV1()
		pl := &flowcontrolv1.PriorityLevelConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "watchcache-reject"},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To(int32(0)), LendablePercent: ptr.To(int32(0)), BorrowingLimitPercent: ptr.To(int32(0)),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			}},
		}
		fs := &flowcontrolv1.FlowSchema{
			ObjectMeta: metav1.ObjectMeta{Name: "watchcache-reject"},
			Spec: flowcontrolv1.FlowSchemaSpec{
				PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: pl.Name},
				MatchingPrecedence:         500,
				Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
					Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
						ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: faultNS, Name: "watchcache-exporter"}}},
					ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, Namespaces: []string{faultNS}}},
				}},
			},
		}
		a := e // the holder since the start
		a.WaitFor(t, 60*time.Second, "a finite window", func(m exportertest.Metrics) bool {
			w, err := m.Get("watchcache_window_seconds")
			return err == nil && !math.IsNaN(w)
		})
		if _, err := fc.PriorityLevelConfigurations().Create(ctx, pl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := fc.FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f := begin(t)
		m0 := a.Scrape(t)
		a.WaitFor(t, 60*time.Second, "probes counted as TooManyRequests", func(m exportertest.Metrics) bool {
			return grew(t, m0, m, 5, "watchcache_exporter_api_errors_total", "operation", "probe", "reason", "TooManyRequests")
		})
		f.detected()
		m1 := a.Scrape(t)
		// Each 429 is the answer of its own request: none turns into a
		// deadline after client-go's silent retries.
		if v, err := m1.Get("watchcache_exporter_api_errors_total", "operation", "probe", "reason", "Unknown"); err == nil && v > m0.Value(t, "watchcache_exporter_api_errors_total", "operation", "probe", "reason", "Unknown") {
			t.Errorf("%v probe errors of reason Unknown under a level that rejects: 429s retried into deadlines", v)
		}
		if err := fc.FlowSchemas().Delete(ctx, fs.Name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		if err := fc.PriorityLevelConfigurations().Delete(ctx, pl.Name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		m2 := a.Scrape(t)
		a.WaitFor(t, 60*time.Second, "the window probed again", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_last_probe_success_timestamp_seconds") > m2.Value(t, "watchcache_last_probe_success_timestamp_seconds")
		})
		f.recovered()
		f.report()
	})

	t.Run("APF throttles the load alone", func(t *testing.T) {
		if code := e.Stop(t); code != 0 {
			t.Fatalf("exit status %d", code)
		}
		pl, fs := apfObjects(t)
		pl.Spec.Limited.NominalConcurrencyShares = ptr.To(int32(1))
		pl.Spec.Limited.LimitResponse = flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}
		fc := admin.FlowcontrolV1()
		if _, err := fc.PriorityLevelConfigurations().Create(ctx, pl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := fc.FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = fc.FlowSchemas().Delete(ctx, fs.Name, metav1.DeleteOptions{})
			_ = fc.PriorityLevelConfigurations().Delete(ctx, pl.Name, metav1.DeleteOptions{})
		}()
		f := begin(t)
		const rate = 200
		a := exportertest.StartReady(t, sa, "--namespace="+faultNS, fmt.Sprintf("--load.rate=%d", rate))
		m0 := a.Scrape(t)
		a.WaitFor(t, 60*time.Second, "throttled writes", func(m exportertest.Metrics) bool {
			return grew(t, m0, m, 10, "watchcache_load_writes_total", "result", "throttled")
		})
		f.detected()
		m1 := a.Scrape(t)
		t1 := time.Now()
		time.Sleep(20 * time.Second)
		m2 := a.Scrape(t)
		secs := time.Since(t1).Seconds()
		throttled := (m2.Value(t, "watchcache_load_writes_total", "result", "throttled") - m1.Value(t, "watchcache_load_writes_total", "result", "throttled")) / secs
		ok := (m2.Value(t, "watchcache_load_writes_total", "result", "ok") - m1.Value(t, "watchcache_load_writes_total", "result", "ok")) / secs
		t.Logf("at %d writes/s asked in a one-seat level: %.1f ok and %.1f throttled a second", rate, ok, throttled)
		// Each worker waits at least the Retry-After (a second) after a 429.
		if workers := math.Ceil(rate / 10.0); throttled > workers*1.05 {
			t.Errorf("%.1f throttled writes a second with %v workers: Retry-After not honoured", throttled, workers)
		}
		// The measurement's requests are in other levels: no error at all.
		if errs := m2.Samples("watchcache_exporter_api_errors_total", "operation"); len(errs) > 0 {
			t.Errorf("measurement errors under APF: %v", errs)
		}
		if v, err := m2.Get("watchcache_reconnects_total", "from", "bookmark", "result", "error"); err == nil && v > 0 {
			t.Errorf("%v failed reconnect probes under APF", v)
		}
		if !a.Ready() || m2.Value(t, "watchcache_exporter_leader") != 1 {
			t.Error("not ready, or not leading, under APF")
		}
		if code := a.Stop(t); code != 0 {
			t.Errorf("exit status %d", code)
		}
		f.recovered()
		f.report()
	})

	t.Run("kill -9 of the holder: the standby adopts and takes over", func(t *testing.T) {
		e.Stop(t) // run alone: the first exporter would hold the Lease
		holder := exportertest.StartProcess(t, sa, args...)
		holder.WaitFor(t, 60*time.Second, "the holder leading and writing", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_exporter_leader") == 1 && m.Value(t, "watchcache_load_writes_total", "result", "ok") > 0
		})
		// Every ConfigMap write, as the test's own watch receives it.
		configMapEvents := arrivals.ConfigMaps(t, c.AdminConfig())
		standby := exportertest.StartReady(t, sa, args...)
		time.Sleep(5 * time.Second)
		m := standby.Scrape(t)
		if m.Value(t, "watchcache_exporter_leader") != 0 || m.Value(t, "watchcache_load_writes_total", "result", "ok") != 0 {
			t.Fatalf("the standby leads (%v) or writes (%v)", m.Value(t, "watchcache_exporter_leader"), m.Value(t, "watchcache_load_writes_total", "result", "ok"))
		}
		if _, err := m.Get("watchcache_quiet_touches_total"); err == nil {
			t.Error("the standby measures")
		}
		// A standby exports only what a standby knows: no objects lost,
		// no horizon, no load target.
		for _, name := range []string{"watchcache_exporter_objects_lost", "watchcache_compaction_window_seconds", "watchcache_load_target_writes_per_second"} {
			if fam, ok := m[name]; ok && len(fam.GetMetric()) > 0 {
				t.Errorf("the standby exports %s: %v", name, fam.GetMetric())
			}
		}
		wantLog(t, standby, "standby: another exporter holds the lease")
		holder.Kill(t)
		f := begin(t)
		standby.WaitFor(t, leader.LeaseDuration+2*leader.RetryPeriod+10*time.Second, "the standby leading", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_exporter_leader") == 1
		})
		f.detected()
		// Its numbers are right from its first full cycle: the first 410
		// within 3 s of capacity/rate, the rate of the ConfigMap events the
		// test's own watch received over the cycle.
		var first exportertest.Metrics
		var firstAt time.Time
		standby.WaitFor(t, 200*time.Second, "the new holder's first expiry cycle", func(m exportertest.Metrics) bool {
			first, firstAt = m, time.Now()
			return m.Sum(t, "watchcache_expiry_cycles_total") >= 1
		})
		f.recovered()
		capacity, err := c.APIServer().MetricValue(ctx, "watch_cache_capacity", map[string]string{"resource": "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
		expiry := first.Value(t, "watchcache_expiry_last_seconds")
		rate := configMapEvents.Rate(firstAt, expiry)
		t.Logf("after the takeover: first 410 after %.2f s; capacity %v at %.2f ConfigMap events/s: %.2f s", expiry, capacity, rate, capacity/rate)
		if want := math.Max(capacity/rate, 75); math.Abs(expiry-want) > 3 {
			t.Errorf("first 410 after %.2f s, want within 3 s of max(75 s, capacity/rate) = %.2f s", expiry, want)
		}
		if code := standby.Stop(t); code != 0 {
			t.Errorf("exit status %d", code)
		}
		if left := ownedConfigMaps(t, cms); len(left) > 0 {
			t.Errorf("ConfigMaps left after the last graceful stop: %v", left)
		}
		if _, err := admin.CoordinationV1().Leases(faultNS).Get(ctx, "watchcache-quiet", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease after the last graceful stop: %v, want it deleted", err)
		}
		f.report()
	})

	// startWriting starts an exporter and waits for its first noise write.
	startWriting := func(t *testing.T, cfg *rest.Config, args ...string) *exportertest.Exporter {
		t.Helper()
		x := exportertest.StartReady(t, cfg, args...)
		x.WaitFor(t, 30*time.Second, "load", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_load_writes_total", "result", "ok") > 0
		})
		return x
	}
	// leftAndNamed are the ConfigMaps a stop left, each named in its log.
	leftAndNamed := func(t *testing.T, x *exportertest.Exporter, why string) []string {
		t.Helper()
		left := ownedConfigMaps(t, cms)
		if len(left) == 0 {
			t.Errorf("no ConfigMap left, yet %s", why)
		}
		for _, name := range left {
			wantLog(t, x, "delete configmap "+faultNS+"/"+name)
		}
		return left
	}

	t.Run("SIGTERM with 1000 noise objects", func(t *testing.T) {
		e.Stop(t) // whichever ran last (run alone: the first one)
		// deploy/'s Role names the default noise objects only: the
		// admin's rights here.
		x := startWriting(t, c.AdminConfig(), "--namespace="+faultNS, "--load.rate=20", "--load.objects=1000")
		start := time.Now()
		for n := 0; n < 1001; n = len(ownedConfigMaps(t, cms)) {
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("%d of 1001 ConfigMaps made after %s", n, time.Since(start).Round(time.Second))
			}
			time.Sleep(time.Second)
		}
		t.Logf("1001 ConfigMaps made in %s", time.Since(start).Round(time.Second))
		f := begin(t)
		code := x.Stop(t)
		f.detected()
		f.recovered()
		if code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
		if left := ownedConfigMaps(t, cms); len(left) > 0 {
			t.Errorf("%d ConfigMaps left after the stop, want none: %v", len(left), left)
		}
		if _, err := admin.CoordinationV1().Leases(faultNS).Get(ctx, "watchcache-quiet", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease: %v, want it deleted", err)
		}
		wantLog(t, x, "deleted the exporter's ConfigMaps")
		f.report()
	})

	t.Run("restarted with fewer objects than a killed run", func(t *testing.T) {
		e.Stop(t)
		// deploy/'s Role names the default 8 noise objects: the admin's
		// rights for 12.
		x := exportertest.StartProcess(t, c.AdminConfig(), "--namespace="+faultNS, "--load.rate=20", "--load.objects=12")
		x.WaitFor(t, time.Minute, "12 noise objects and quiet", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_exporter_leader") == 1 && len(ownedConfigMaps(t, cms)) == 13
		})
		x.Kill(t)
		// Its Lease would expire within a minute; what is tested here is
		// what comes after.
		if err := admin.CoordinationV1().Leases(faultNS).Delete(ctx, "watchcache-quiet", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// As deploy/'s Role says: to lower --load.objects, the names above
		// the new count stay in a get and delete rule until the exporter
		// has deleted them.
		var extras []string
		for i := 8; i < 12; i++ {
			extras = append(extras, fmt.Sprintf("watchcache-noise-%d", i))
		}
		cleanup := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "watchcache-exporter-cleanup", Namespace: faultNS},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: extras, Verbs: []string{"get", "delete"}}}}
		binding := rb.DeepCopy()
		binding.ObjectMeta = metav1.ObjectMeta{Name: cleanup.Name, Namespace: faultNS}
		binding.RoleRef.Name = cleanup.Name
		if _, err := admin.RbacV1().Roles(faultNS).Create(ctx, cleanup, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().RoleBindings(faultNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = admin.RbacV1().RoleBindings(faultNS).Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
			_ = admin.RbacV1().Roles(faultNS).Delete(context.Background(), cleanup.Name, metav1.DeleteOptions{})
		}()
		f := begin(t)
		y := exportertest.StartReady(t, sa, args...)
		y.WaitFor(t, time.Minute, "the extras deleted: quiet and 8 noise objects left", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_exporter_leader") == 1 && len(ownedConfigMaps(t, cms)) == 9
		})
		f.detected()
		y.WaitFor(t, 30*time.Second, "load", func(m exportertest.Metrics) bool {
			return m.Value(t, "watchcache_load_writes_total", "result", "ok") > 0
		})
		f.recovered()
		wantLog(t, y, "deleted the noise objects a previous run made beyond this run's")
		quiet, err := cms.Get(ctx, "watchcache-quiet", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := quiet.Annotations[owned.NoiseObjectsAnnotation]; got != "8" {
			t.Errorf("quiet records %q noise objects, want 8", got)
		}
		if code := y.Stop(t); code != 0 {
			t.Errorf("exit status %d", code)
		}
		if left := ownedConfigMaps(t, cms); len(left) > 0 {
			t.Errorf("ConfigMaps left after the stop: %v", left)
		}
		f.report()
	})

	t.Run("SIGTERM with the apiserver down", func(t *testing.T) {
		e = startWriting(t, sa, args...)
		if err := c.APIServer().Stop(); err != nil {
			t.Fatal(err)
		}
		f := begin(t)
		code := e.Stop(t)
		f.detected()
		f.recovered()
		if code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
		// terminationGracePeriodSeconds is 30.
		if f.detect > 25*time.Second {
			t.Errorf("stopped after %s with the apiserver down, want within 25 s", f.detect)
		}
		wantLog(t, e, "those it could not delete are left, for the next exporter here to adopt, or for deleting by hand")
		if err := c.APIServer().Start(ctx); err != nil {
			t.Fatal(err)
		}
		// What it left, it named; the next start adopts it (as the
		// standby above adopted the killed holder's objects).
		leftAndNamed(t, e, "the apiserver was down at the stop")
		f.report()
	})

	t.Run("SIGTERM with the apiserver blackholed", func(t *testing.T) {
		// The previous stop left its Lease: it would hold the next
		// exporter back until it expires.
		if err := admin.CoordinationV1().Leases(faultNS).Delete(ctx, "watchcache-quiet", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		px := blackhole.Start(t, strings.TrimPrefix(sa.Host, "https://"))
		via := rest.CopyConfig(sa)
		via.Host = "https://" + px.Addr
		const budget = 15 * time.Second
		e = startWriting(t, via, append(slices.Clone(args), fmt.Sprintf("--shutdown.timeout=%s", budget))...)
		px.Hole() // requests get no answer, not a refusal
		f := begin(t)
		code := e.Stop(t)
		f.detected()
		f.recovered()
		if code != 0 {
			t.Errorf("exit status %d, want 0", code)
		}
		if f.detect > budget+3*time.Second {
			t.Errorf("stopped after %s with the apiserver blackholed, want within its --shutdown.timeout=%s", f.detect, budget)
		}
		// It says what it left: every ConfigMap, and the Lease.
		wantLog(t, e, "the lease is left")
		left := leftAndNamed(t, e, "the apiserver did not answer at the stop")
		if _, err := admin.CoordinationV1().Leases(faultNS).Get(ctx, "watchcache-quiet", metav1.GetOptions{}); err != nil {
			t.Errorf("the Lease: %v, want it left (its deletion got no answer)", err)
		}
		for _, name := range left {
			if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}
		if err := admin.CoordinationV1().Leases(faultNS).Delete(ctx, "watchcache-quiet", metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		f.report()
	})

	http.DefaultClient.CloseIdleConnections()
	goleak.VerifyNone(t, leaks,
		// Idle keep-alive connections of client-go's shared transports.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		// The control plane's processes started again by the faults.
		goleak.IgnoreAnyFunction("github.com/watchcache/watchcache-exporter/test/testcluster.(*Process).Start.func1"))
}

func readYAML[T any](t *testing.T, path string) *T {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := new(T)
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// apfObjects are deploy/'s PriorityLevelConfiguration and FlowSchema.
func apfObjects(t *testing.T) (*flowcontrolv1.PriorityLevelConfiguration, *flowcontrolv1.FlowSchema) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "components", "apf", "flowcontrol.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("flowcontrol.yaml: %d documents, want 2", len(docs))
	}
	pl, fs := &flowcontrolv1.PriorityLevelConfiguration{}, &flowcontrolv1.FlowSchema{}
	if err := yaml.UnmarshalStrict(docs[0], pl); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(docs[1], fs); err != nil {
		t.Fatal(err)
	}
	return pl, fs
}

// grew says whether a sample grew by more than by between two scrapes.
func grew(t *testing.T, before, now exportertest.Metrics, by float64, name string, labels ...string) bool {
	t.Helper()
	b, _ := before.Get(name, labels...) // 0 when not yet exposed
	n, err := now.Get(name, labels...)
	return err == nil && n > b+by
}

func wantLog(t *testing.T, e *exportertest.Exporter, s string) {
	t.Helper()
	if !strings.Contains(e.Logs(), s) {
		t.Errorf("no log line with %q", s)
	}
}

func updateRole(t *testing.T, cs kubernetes.Interface, role *rbacv1.Role) {
	t.Helper()
	cur, err := cs.RbacV1().Roles(faultNS).Get(t.Context(), role.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Rules = role.Rules
	if _, err := cs.RbacV1().Roles(faultNS).Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

type configMaps interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
	Update(ctx context.Context, cm *corev1.ConfigMap, opts metav1.UpdateOptions) (*corev1.ConfigMap, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
}

// takeMarks removes the owner annotation of name, as somebody taking the
// object over would, and returns the object as they left it.
func takeMarks(t *testing.T, cms configMaps, name string) *corev1.ConfigMap {
	t.Helper()
	for {
		cm, err := cms.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(cm.Annotations, owned.OwnerAnnotation)
		cm.Data = map[string]string{"theirs": "yes"}
		cm, err = cms.Update(t.Context(), cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // the exporter wrote it meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
}

// waitLost waits until the exporter reports name lost: the metric, and
// readiness failing.
func waitLost(t *testing.T, e *exportertest.Exporter, name string) {
	t.Helper()
	e.WaitFor(t, 30*time.Second, name+" reported lost", func(m exportertest.Metrics) bool {
		return m.Value(t, "watchcache_exporter_objects_lost") == 1 && !e.Ready()
	})
}

// wantUnwritten fails unless taken is still as its taker left it.
func wantUnwritten(t *testing.T, cms configMaps, taken *corev1.ConfigMap) {
	t.Helper()
	got, err := cms.Get(t.Context(), taken.Name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("their %s: %v", taken.Name, err)
	} else if got.ResourceVersion != taken.ResourceVersion {
		t.Errorf("their %s was written: RV %s -> %s", taken.Name, taken.ResourceVersion, got.ResourceVersion)
	}
}

func giveMarksBack(t *testing.T, cms configMaps, cm *corev1.ConfigMap) {
	t.Helper()
	cm = cm.DeepCopy()
	cm.Annotations[owned.OwnerAnnotation] = faultNS + "/watchcache-quiet"
	if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitOwned(t *testing.T, cms configMaps, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cm, err := cms.Get(t.Context(), name, metav1.GetOptions{})
		if err == nil && cm.Annotations[owned.OwnerAnnotation] == faultNS+"/watchcache-quiet" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not the exporter's within %s: %v", name, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func ownedConfigMaps(t *testing.T, cms configMaps) []string {
	t.Helper()
	l, err := cms.List(t.Context(), metav1.ListOptions{LabelSelector: owned.ManagedBySelector})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range l.Items {
		names = append(names, cm.Name)
	}
	return names
}
