package owned

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/watchcache/watchcache-exporter/test/fakecache"
	"github.com/watchcache/watchcache-exporter/test/typed"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestStore(t *testing.T) (*Store, *fakecache.Server, *fakeClock, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	clk := &fakeClock{time.Unix(1e9, 0)}
	return NewStore("ns", "quiet", reg, logr.Discard(), clk.now), fakecache.New(100), clk, reg
}

func theirs(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7",
		Labels: map[string]string{ManagedByLabel: ManagedBy}}, Data: map[string]string{"keep": "me"}}
}

func TestSeqPatch(t *testing.T) {
	s, _, _, _ := newTestStore(t)
	var ops []map[string]any
	if err := json.Unmarshal(s.seqPatch("42"), &ops); err != nil {
		t.Fatalf("%s: %v", s.seqPatch("42"), err)
	}
	want := []map[string]any{
		{"op": "test", "path": "/metadata/labels/app.kubernetes.io~1managed-by", "value": "watchcache-exporter"},
		{"op": "test", "path": "/metadata/annotations/watchcache-exporter~1owner", "value": "ns/quiet"},
		{"op": "add", "path": "/data", "value": map[string]any{"seq": "42"}},
	}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("got %v\nwant %v", ops, want)
	}
}

func TestNotOwned(t *testing.T) {
	s, cs, _, _ := newTestStore(t)
	ctx := t.Context()
	if _, _, err := s.Ensure(ctx, typed.Core(cs.CoreV1()), "mine", RoleNoise); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, theirs("other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An object of another exporter (same label, another owner) is not ours.
	other := NewStore("ns", "quiet2", prometheus.NewRegistry(), logr.Discard(), time.Now)
	if _, _, err := other.Ensure(ctx, typed.Core(cs.CoreV1()), "another", RoleNoise); err != nil {
		t.Fatal(err)
	}
	got, err := s.NotOwned(ctx, typed.Core(cs.CoreV1()), "mine", "other", "missing", "another")
	if err != nil || !reflect.DeepEqual(got, []string{"other", "another"}) {
		t.Errorf("NotOwned = %v, %v; want [other another]", got, err)
	}
	// Many names, read concurrently: the answer keeps their order.
	var names, want []string
	for i := range 200 {
		name := fmt.Sprintf("n-%d", i)
		names = append(names, name)
		if i%70 == 3 {
			want = append(want, name)
			_, err = cs.CoreV1().ConfigMaps("ns").Create(ctx, theirs(name), metav1.CreateOptions{})
		} else if i%2 == 0 {
			_, _, err = s.Ensure(ctx, typed.Core(cs.CoreV1()), name, RoleNoise)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.NotOwned(ctx, typed.Core(cs.CoreV1()), names...); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("NotOwned of 200 = %v, %v; want %v", got, err, want)
	}
}

func TestLostAndBack(t *testing.T) {
	s, cs, clk, reg := newTestStore(t)
	ctx := t.Context()
	cms := cs.CoreV1().ConfigMaps("ns")
	if _, created, err := s.Ensure(ctx, typed.Core(cs.CoreV1()), "n0", RoleNoise); err != nil || !created {
		t.Fatalf("Ensure: created %v, %v", created, err)
	}
	if _, err := s.SetSeq(ctx, typed.Core(cs.CoreV1()), "n0", "1"); err != nil {
		t.Fatal(err)
	}
	// Somebody takes it: the marks go, and their data stays as it is.
	cm, _ := cms.Get(ctx, "n0", metav1.GetOptions{})
	delete(cm.Annotations, OwnerAnnotation)
	cm.Data = map[string]string{"theirs": "x"}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetSeq(ctx, typed.Core(cs.CoreV1()), "n0", "2"); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("SetSeq on a taken object: %v, want ErrNotOwned", err)
	}
	if got, _ := cms.Get(ctx, "n0", metav1.GetOptions{}); !reflect.DeepEqual(got.Data, map[string]string{"theirs": "x"}) {
		t.Errorf("their data became %v", got.Data)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watchcache_exporter_objects_lost ConfigMaps of the exporter's names that no longer carry its marks (label app.kubernetes.io/managed-by=watchcache-exporter, annotation watchcache-exporter/owner): no longer written or deleted, until their marks are back or they are deleted. Absent on a standby, which reads none of them.
# TYPE watchcache_exporter_objects_lost gauge
watchcache_exporter_objects_lost 1
`)); err != nil {
		t.Error(err)
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "n0") {
		t.Errorf("Ready = %v, want n0 named", err)
	}
	if s.Usable(ctx, typed.Core(cs.CoreV1()), "n0", RoleNoise) {
		t.Error("a lost object is usable")
	}
	if left, err := s.Delete(ctx, typed.Core(cs.CoreV1()), "n0"); err != nil || len(left) > 0 {
		t.Errorf("Delete of a taken object: %v, left %q; want it left without an error", err, left)
	}
	if _, err := cms.Get(ctx, "n0", metav1.GetOptions{}); err != nil {
		t.Errorf("the taken object was deleted: %v", err)
	}
	// They delete it: after the recheck interval it is ours again, created.
	if err := cms.Delete(ctx, "n0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(recheckEvery - time.Second)
	if s.Usable(ctx, typed.Core(cs.CoreV1()), "n0", RoleNoise) {
		t.Error("rechecked before the interval")
	}
	clk.t = clk.t.Add(recheckEvery)
	if !s.Usable(ctx, typed.Core(cs.CoreV1()), "n0", RoleNoise) {
		t.Error("not usable again after its deletion and the interval")
	}
	if s.Ready() != nil || len(s.Lost()) != 0 || testutil.ToFloat64(s.lostGauge) != 0 {
		t.Errorf("still lost: %v", s.Lost())
	}
	if _, err := s.SetSeq(ctx, typed.Core(cs.CoreV1()), "n0", "3"); err != nil {
		t.Errorf("SetSeq after taking it back: %v", err)
	}
	if _, err := s.Delete(ctx, typed.Core(cs.CoreV1()), "n0", "never-made"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := cms.Get(ctx, "n0", metav1.GetOptions{}); err == nil {
		t.Error("n0 not deleted")
	}
}

func TestTouchAndRelist(t *testing.T) {
	s, cs, _, _ := newTestStore(t)
	ctx := t.Context()
	if _, created, err := s.Relist(ctx, typed.Core(cs.CoreV1()), "quiet", RoleQuiet); err != nil || !created {
		t.Fatalf("Relist: created %v, %v", created, err)
	}
	if _, err := s.Touch(ctx, typed.Core(cs.CoreV1()), "quiet", "touched", "now"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Touch(ctx, typed.Core(cs.CoreV1()), "absent", "touched", "now"); err == nil {
		t.Error("Touch of a missing object: no error")
	}
	made, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, theirs("q2"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Touch(ctx, typed.Core(cs.CoreV1()), "q2", "touched", "now"); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Touch of theirs: %v, want ErrNotOwned", err)
	}
	if _, _, err := s.Relist(ctx, typed.Core(cs.CoreV1()), "q2", RoleQuiet); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Relist of theirs: %v, want ErrNotOwned", err)
	}
	if got := cs.Get("q2"); got.ResourceVersion != made.ResourceVersion || !reflect.DeepEqual(got.Data, theirs("q2").Data) {
		t.Errorf("theirs changed: %v", got)
	}
}

func TestParseRV(t *testing.T) {
	if rv, err := ParseRV("12345"); err != nil || rv != 12345 {
		t.Errorf("ParseRV(12345) = %d, %v", rv, err)
	}
	if _, err := ParseRV("abc"); err == nil {
		t.Error("ParseRV(abc): no error")
	}
}

func BenchmarkSeqPatch(b *testing.B) {
	s := NewStore("ns", "quiet", prometheus.NewRegistry(), logr.Discard(), time.Now)
	b.ReportAllocs()
	for b.Loop() {
		s.seqPatch("1234567")
	}
}

// An object deleted and re-created by somebody else between the exporter's
// read and its delete: the UID precondition fails, the read again shows it
// is theirs, and it stays.
func TestDeleteHonoursUID(t *testing.T) {
	s, srv, _, _ := newTestStore(t)
	ctx := t.Context()
	if _, _, err := s.Ensure(ctx, typed.Core(srv.CoreV1()), "n0", RoleNoise); err != nil {
		t.Fatal(err)
	}
	replaced := false
	srv.Client.PrependReactor("delete", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !replaced {
			replaced = true
			cm := theirs("n0")
			cm.UID = "their-uid"
			srv.Put(cm)
		}
		return false, nil, nil
	})
	if _, err := s.Delete(ctx, typed.Core(srv.CoreV1()), "n0"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if got := srv.Get("n0"); got == nil || got.UID != "their-uid" {
		t.Errorf("their object was deleted: %v", got)
	}
}

// Delete names what it could not delete: an apiserver that does not answer
// within the deadline leaves every object, and each is named.
func TestDeleteNamesWhatIsLeft(t *testing.T) {
	srv := fakecache.New(100)
	s := NewStore("ns", "q", prometheus.NewRegistry(), logr.Discard(), time.Now)
	srv.Client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("no answer")
	})
	left, err := s.Delete(t.Context(), typed.Core(srv.CoreV1()), "n0", "n1", "q")
	if err == nil || !slices.Equal(left, []string{"n0", "n1", "q"}) {
		t.Errorf("Delete = %q, %v; want all three left, and an error", left, err)
	}
}

// A list that never shows the object a create says exists (a stale or
// filtered list): Relist tries a few times, each after a longer pause, then
// says why it gave up, rather than spinning.
func TestRelistAlreadyExistsBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, srv, _, _ := newTestStore(t)
		var creates []time.Time
		srv.Client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "100"}}, nil
		})
		srv.Client.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			creates = append(creates, time.Now())
			if len(creates) > 50 {
				t.Fatal("50 creates: Relist does not give up")
			}
			return true, nil, apierrors.NewAlreadyExists(corev1.Resource("configmaps"), "quiet")
		})
		_, _, err := s.Relist(t.Context(), typed.Core(srv.CoreV1()), "quiet", RoleQuiet)
		if err == nil || !apierrors.IsAlreadyExists(err) || !strings.Contains(err.Error(), "5 times") {
			t.Errorf("Relist: %v, want AlreadyExists after 5 tries", err)
		}
		if len(creates) != 5 {
			t.Fatalf("%d creates, want 5", len(creates))
		}
		for i := 2; i < len(creates); i++ {
			if prev, cur := creates[i-1].Sub(creates[i-2]), creates[i].Sub(creates[i-1]); cur <= prev {
				t.Errorf("pause %d of %s after one of %s: want it longer", i, cur, prev)
			}
		}
	})
}

// A leader counts lost objects from 0; once it stands by, the count and
// what it knew are gone: a standby reads none of the objects.
func TestStandbyExportsNoLostCount(t *testing.T) {
	s, srv, _, reg := newTestStore(t)
	count := func() int {
		n, err := testutil.GatherAndCount(reg, "watchcache_exporter_objects_lost")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Errorf("%d series before leading, want none", n)
	}
	s.SetLeading(true)
	if n := count(); n != 1 || testutil.ToFloat64(s.lostGauge) != 0 {
		t.Errorf("leading: %d series of value %v, want one of 0", n, testutil.ToFloat64(s.lostGauge))
	}
	srv.Put(theirs("n0"))
	if _, _, err := s.Ensure(t.Context(), typed.Core(srv.CoreV1()), "n0", RoleNoise); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Ensure of theirs: %v", err)
	}
	if got := testutil.ToFloat64(s.lostGauge); got != 1 {
		t.Errorf("lost %v, want 1", got)
	}
	s.SetLeading(false)
	if n := count(); n != 0 || len(s.Lost()) != 0 {
		t.Errorf("standing by: %d series, lost %v; want none", n, s.Lost())
	}
}

// TestRecord: quiet records the noise objects made; Recorded reads them
// back (none before a record, and quiet created when missing); a record
// that is not a count is an error, not a guess.
func TestRecord(t *testing.T) {
	s, cs, _, _ := newTestStore(t)
	ctx := t.Context()
	c := typed.Core(cs.CoreV1())
	if names, err := s.Recorded(ctx, c, "quiet"); err != nil || len(names) != 0 {
		t.Fatalf("Recorded before any record: %v, %v; want none", names, err)
	}
	if cs.Get("quiet") == nil {
		t.Fatal("Recorded did not create quiet")
	}
	if err := s.Record(ctx, c, "quiet", "noise-", 3); err != nil {
		t.Fatal(err)
	}
	if names, err := s.Recorded(ctx, c, "quiet"); err != nil || !slices.Equal(names, []string{"noise-0", "noise-1", "noise-2"}) {
		t.Errorf("Recorded: %v, %v; want noise-0..2", names, err)
	}
	if err := s.Record(ctx, c, "quiet", "", 0); err != nil {
		t.Fatal(err)
	}
	if names, err := s.Recorded(ctx, c, "quiet"); err != nil || len(names) != 0 {
		t.Errorf("Recorded after a record of none: %v, %v", names, err)
	}
	for _, bad := range []string{"x", "-1", "1001"} {
		cm := cs.Get("quiet")
		cm.Annotations[NoiseObjectsAnnotation] = bad
		if _, err := cs.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if names, err := s.Recorded(ctx, c, "quiet"); err == nil || !strings.Contains(err.Error(), NoiseObjectsAnnotation) {
			t.Errorf("record %q: %v, %v; want an error naming the annotation", bad, names, err)
		}
	}
	// Theirs: neither read nor written.
	if _, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, theirs("q2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, c, "q2", "noise-", 3); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Record on theirs: %v, want ErrNotOwned", err)
	}
	if _, err := s.Recorded(ctx, c, "q2"); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Recorded of theirs: %v, want ErrNotOwned", err)
	}
}
