package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

const ns = "default"

var tooOld = regexp.MustCompile(`^too old resource version: (\d+) \((\d+)\)$`)

func TestControlPlane(t *testing.T) {
	// Beside it, TestStartFailureLeavesNothingRunning would count this
	// test's processes as its own: parallel tests start after it ends.
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := clientset(t, c.AdminConfig())

	t.Run("version", func(t *testing.T) {
		v, err := admin.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.37.2" {
			t.Errorf("apiserver /version = %s, want v1.37.2", v.GitVersion)
		}
	})

	t.Run("bookmark watch gets events", func(t *testing.T) {
		rv := createConfigMap(ctx, t, admin, "watched-0")
		w, err := admin.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{
			ResourceVersion:     rv,
			AllowWatchBookmarks: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		createConfigMap(ctx, t, admin, "watched-1")
		for {
			ev := next(ctx, t, w)
			if ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type != watch.Added {
				t.Fatalf("event %s %#v, want ADDED", ev.Type, ev.Object)
			}
			if name := ev.Object.(*corev1.ConfigMap).Name; name != "watched-1" {
				t.Fatalf("ADDED %s, want watched-1 (the watch started after watched-0)", name)
			}
			return
		}
	})

	t.Run("watch cache capacity from /metrics", func(t *testing.T) {
		capacity, err := c.APIServer().MetricValue(ctx, "watch_cache_capacity", map[string]string{"resource": "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
		// The ring buffer starts at 100 and only ever doubles or halves.
		if capacity < 100 || capacity > 102400 || !isPow2(int(capacity)/100) || int(capacity)%100 != 0 {
			t.Errorf("watch_cache_capacity{resource=configmaps} = %v, want 100·2^k", capacity)
		}
	})

	t.Run("etcd's writes between two RVs, by resource", func(t *testing.T) {
		from, err := strconv.ParseUint(createConfigMap(ctx, t, admin, "counted-0"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		createConfigMap(ctx, t, admin, "counted-1")
		sa, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "counted"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		to, err := strconv.ParseUint(createConfigMap(ctx, t, admin, "counted-2"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.EtcdWrites(ctx, from, to)
		if err != nil {
			t.Fatal(err)
		}
		// The apiserver's own Lease renewals may fall in between; nothing
		// else writes ConfigMaps or ServiceAccounts here.
		total := 0
		for _, n := range got {
			total += n
		}
		if got["configmaps"] != 2 || got["serviceaccounts"] != 1 || uint64(total) != to-from {
			t.Errorf("etcd's writes in (%d, %d] (ServiceAccount at %s) = %v; want 2 configmaps, 1 serviceaccounts and %d in all", from, to, sa.ResourceVersion, got, to-from)
		}
	})

	t.Run("serviceaccount RBAC", func(t *testing.T) {
		saCfg, err := c.ServiceAccountConfig(ctx, ns, "rbac-probe")
		if err != nil {
			t.Fatal(err)
		}
		sa := clientset(t, saCfg)
		if _, err := sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("list configmaps without a RoleBinding: err = %v, want 403 Forbidden", err)
		}
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe", Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}},
		}
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "rbac-probe"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "rbac-probe", Namespace: ns}},
		}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The authorizer reads RBAC objects through an informer: allow it a
		// moment to see the new binding.
		var listErr error
		for i := 0; i < 50; i++ {
			if _, listErr = sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); listErr == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if listErr != nil {
			t.Fatalf("list configmaps with a RoleBinding: %v", listErr)
		}
		err = sa.CoreV1().ConfigMaps(ns).Delete(ctx, "watched-0", metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("delete configmap, a verb the Role does not grant: err = %v, want 403 Forbidden", err)
		}
	})

	// Last: it restarts the apiservers.
	t.Run("restart expires older RVs, per apiserver", func(t *testing.T) {
		second, err := c.AddAPIServer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		admin1 := clientset(t, second.AdminConfig())
		rv := createConfigMap(ctx, t, admin, "before-restart")
		// A write after rv, so that the rebuilt cache starts past it.
		createConfigMap(ctx, t, admin, "after-rv")
		if err := c.APIServer().Restart(ctx); err != nil {
			t.Fatal(err)
		}
		admin0 := clientset(t, c.AdminConfig())

		ev := watchOnce(ctx, t, admin0, rv)
		if ev.Type != watch.Error {
			t.Fatalf("restarted apiserver: watch from pre-restart RV %s: first event %s, want ERROR", rv, ev.Type)
		}
		st, ok := ev.Object.(*metav1.Status)
		if !ok {
			t.Fatalf("ERROR event carries %T, want *metav1.Status", ev.Object)
		}
		if st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
			t.Errorf("status code %d reason %s, want 410 Expired", st.Code, st.Reason)
		}
		m := tooOld.FindStringSubmatch(st.Message)
		if m == nil {
			t.Fatalf("message %q, want %q", st.Message, tooOld)
		}
		requested, _ := strconv.ParseUint(m[1], 10, 64)
		oldest, _ := strconv.ParseUint(m[2], 10, 64)
		if want, _ := strconv.ParseUint(rv, 10, 64); requested != want {
			t.Errorf("message names RV %d, want the requested %d", requested, want)
		}
		if oldest <= requested {
			t.Errorf("message gives the cache's oldest as %d, want > requested %d", oldest, requested)
		}

		// The other apiserver keeps its own cache and still serves rv.
		ev = watchOnce(ctx, t, admin1, rv)
		if ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "after-rv" {
			t.Fatalf("second apiserver: watch from RV %s: first event %s %T, want ADDED after-rv", rv, ev.Type, ev.Object)
		}
	})
}

func TestStartFailureLeavesNothingRunning(t *testing.T) {
	testcluster.Real(t)
	bin, err := testcluster.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := testcluster.CheckBinaries(bin); err != nil {
		testcluster.Missing(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = testcluster.New(ctx, testcluster.Options{
		Dir:            t.TempDir(),
		APIServerFlags: []string{"--no-such-flag"},
	})
	if err == nil {
		t.Fatal("New with a bad apiserver flag succeeded")
	}
	if !regexp.MustCompile(`apiserver-0 exited before it was ready .*apiserver-0\.log`).MatchString(err.Error()) {
		t.Errorf("error %q does not name the apiserver and its log", err)
	}
	// etcd had started; it must have been stopped with the failed apiserver.
	if kids := children(t); len(kids) > 0 {
		t.Errorf("child processes left running: %v", kids)
	}
}

func TestMissingBinariesSayHowToBuild(t *testing.T) {
	_, err := testcluster.New(context.Background(), testcluster.Options{BinDir: t.TempDir()})
	if err == nil {
		t.Fatal("New without binaries succeeded")
	}
	for _, want := range []string{"kube-apiserver", "etcd", "make kube-bin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// children lists the PIDs of this process's live children.
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		if err != nil {
			continue // the thread ended meanwhile
		}
		pids = append(pids, strings.Fields(string(b))...)
	}
	return pids
}

func clientset(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func createConfigMap(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

func watchOnce(ctx context.Context, t *testing.T, cs kubernetes.Interface, rv string) watch.Event {
	t.Helper()
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	return next(ctx, t, w)
}

func next(ctx context.Context, t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed before an event")
		}
		return ev
	case <-ctx.Done():
		t.Fatal(fmt.Errorf("no watch event: %w", ctx.Err()))
	}
	panic(errors.New("unreachable"))
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// A claim holds while its test runs and ends with it: what removeLeftovers of
// the kind harness relies on to spare another binary's cluster.
func TestClaim(t *testing.T) {
	name := fmt.Sprintf("claim-test-%d", os.Getpid())
	if testcluster.Claimed(t, name) {
		t.Fatalf("%s claimed before anyone claimed it", name)
	}
	t.Run("held", func(t *testing.T) {
		testcluster.Claim(t, name)
		if !testcluster.Claimed(t, name) {
			t.Errorf("%s not claimed while its claim holds", name)
		}
	})
	if testcluster.Claimed(t, name) {
		t.Errorf("%s still claimed after its test ended", name)
	}
}
