package daemon

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// TestClientsAnswer429: the object counts' and the compaction prober's
// clients see a 429 as the answer of its one request, with the pause it
// asked for, as the probes do: client-go would retry it up to 10 times in
// silence, and a timed LIST would take the retries' seconds.
func TestClientsAnswer429(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		// As API Priority and Fairness rejects: plain text, Retry-After.
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte("Too many requests, please try again later.\n"))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, QPS: 100, Burst: 100}
	for name, build := range map[string]func(*rest.Config) (metadata.Interface, error){
		"counts": countsClient, "compaction": compactionClient,
	} {
		t.Run(name, func(t *testing.T) {
			c, err := build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			requests.Store(0)
			_, err = c.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).List(t.Context(), metav1.ListOptions{Limit: 1})
			if !apierrors.IsTooManyRequests(err) {
				t.Errorf("err %v, want TooManyRequests", err)
			}
			if d, ok := apierrors.SuggestsClientDelay(err); !ok || d != 1 {
				t.Errorf("suggested delay %v s (%v), want 1", d, ok)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("%d requests for one List, want 1: the 429 was retried", n)
			}
		})
	}
}
