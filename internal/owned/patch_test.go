package owned

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/watchcache/watchcache-exporter/internal/kube"
)

// SetSeq over HTTP: the patch the apiserver gets, the RV of its answer, and
// each failed answer as the error client-go would give (a Status, a plain
// 429 with Retry-After, a failed test of the marks).
func TestSetSeqHTTP(t *testing.T) {
	s := NewStore("ns", "quiet", prometheus.NewRegistry(), logr.Discard(), time.Now)
	ours := s.newConfigMap("n0", RoleNoise)
	theirs := ours.DeepCopy()
	theirs.Annotations = nil
	var answer func(w http.ResponseWriter)
	var got *corev1.ConfigMap // what a GET of n0 returns
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/ns/configmaps/n0" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		switch r.Method {
		case http.MethodPatch:
			body, _ := io.ReadAll(r.Body)
			if ct := r.Header.Get("Content-Type"); ct != "application/json-patch+json" || !strings.Contains(string(body), `{"op":"test","path":"/metadata/annotations/watchcache-exporter~1owner","value":"ns/quiet"}`) ||
				!strings.HasSuffix(string(body), `{"seq":"7"}}]`) {
				t.Errorf("patch %s: %s", ct, body)
			}
			answer(w)
		case http.MethodGet:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(got)
		}
	}))
	defer srv.Close()
	c, err := kube.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	status := func(code int, st metav1.Status) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			st.Kind, st.APIVersion, st.Status, st.Code = "Status", "v1", metav1.StatusFailure, int32(code)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(st)
		}
	}

	answer = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"n0","resourceVersion":"4242","managedFields":[{"manager":"x"}]},"data":{"seq":"7"}}`)
	}
	if rv, err := s.SetSeq(t.Context(), c, "n0", "7"); err != nil || rv != 4242 {
		t.Errorf("ok: %v, %v; want 4242", rv, err)
	}

	answer = func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "3")
		http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
	}
	_, err = s.SetSeq(t.Context(), c, "n0", "7")
	if secs, ok := apierrors.SuggestsClientDelay(err); !apierrors.IsTooManyRequests(err) || !ok || secs != 3 {
		t.Errorf("APF's 429: %v (delay %v, %v); want TooManyRequests, 3 s", err, secs, ok)
	}

	answer = status(http.StatusNotFound, metav1.Status{Reason: metav1.StatusReasonNotFound, Message: `configmaps "n0" not found`})
	if _, err := s.SetSeq(t.Context(), c, "n0", "7"); !apierrors.IsNotFound(err) || err.Error() != `configmaps "n0" not found` {
		t.Errorf("404: %v, want NotFound", err)
	}

	// A failed test (422): the object is read again to tell whose it is.
	answer = status(http.StatusUnprocessableEntity, metav1.Status{Reason: metav1.StatusReasonInvalid, Message: "the test failed"})
	got = ours
	if _, err := s.SetSeq(t.Context(), c, "n0", "7"); !apierrors.IsInvalid(err) {
		t.Errorf("422 on our object: %v, want Invalid", err)
	}
	got = theirs
	if _, err := s.SetSeq(t.Context(), c, "n0", "7"); !errors.Is(err, ErrNotOwned) {
		t.Errorf("422 on an object that lost its marks: %v, want ErrNotOwned", err)
	}
}

// metadataRV finds the ConfigMap's own RV in the apiserver's JSON, whatever
// its labels, annotations and data hold, and gives up (for a full decode)
// where the JSON is not written in ObjectMeta's order.
func TestMetadataRV(t *testing.T) {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u", ResourceVersion: "12345",
			Labels:        map[string]string{"resourceVersion": "1"},
			Annotations:   map[string]string{"a": `"resourceVersion":"2"`, "resourceVersion": "3"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Data: map[string]string{"resourceVersion": "4"},
	}
	b, err := json.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	if rv, ok := metadataRV(b); !ok || rv != "12345" {
		t.Errorf("metadataRV = %q, %v; want 12345", rv, ok)
	}
	// Annotations before the RV (not the apiserver's order): not trusted.
	if rv, ok := metadataRV([]byte(`{"metadata":{"annotations":{"resourceVersion":"3"},"resourceVersion":"9"}}`)); ok {
		t.Errorf("metadataRV of out-of-order metadata = %q, want not found", rv)
	}
	for _, bad := range []string{`{}`, `{"data":{"resourceVersion":"4"}}`, `{"metadata":{"name":"n"}}`, `{"metadata":{"resourceVersion":""}}`} {
		if rv, ok := metadataRV([]byte(bad)); ok {
			t.Errorf("metadataRV(%s) = %q, want not found", bad, rv)
		}
	}
}
