package finalanswer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// An apiserver that answers every request with 429 and Retry-After: as API
// Priority and Fairness does (plain text), or as a watch cache that is
// (re)initialising does (a Status).
func throttling(t *testing.T, status bool) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", "1")
		if !status {
			http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		st := apierrors.NewTooManyRequests("storage is (re)initializing", 1).ErrStatus
		st.Kind, st.APIVersion = "Status", "v1"
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func watchOnce(t *testing.T, host string, wrap bool, timeout time.Duration) error {
	cfg := &rest.Config{Host: host}
	if wrap {
		cfg.WrapTransport = Wrap
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
	if err == nil {
		w.Stop()
	}
	return err
}

func TestWrap(t *testing.T) {
	for _, status := range []bool{false, true} {
		srv, n := throttling(t, status)
		err := watchOnce(t, srv.URL, true, 10*time.Second)
		if n.Load() != 1 {
			t.Errorf("status body %v: %d requests, want the first answer", status, n.Load())
		}
		if !apierrors.IsTooManyRequests(err) {
			t.Errorf("status body %v: %v, want TooManyRequests", status, err)
		}
		if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs != 1 {
			t.Errorf("status body %v: delay %d (%v), want Retry-After's 1 s", status, secs, ok)
		}
		if status && !strings.Contains(err.Error(), "initializing") {
			t.Errorf("the Status's message is lost: %v", err)
		}
	}
}

// The premise: without Wrap, client-go retries the 429 silently.
func TestClientGoRetriesWithoutWrap(t *testing.T) {
	srv, n := throttling(t, false)
	_ = watchOnce(t, srv.URL, false, 2500*time.Millisecond)
	if n.Load() < 2 {
		t.Errorf("%d requests in 2.5 s without Wrap: client-go no longer retries 429s, and Wrap is not needed", n.Load())
	}
}
