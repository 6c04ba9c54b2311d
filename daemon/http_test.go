package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeWebConfig writes a TLS key pair for 127.0.0.1 and a web config with
// one basic auth user, prom:secret.
func writeWebConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		"web.yml": []byte("tls_server_config:\n  cert_file: " + filepath.Join(dir, "tls.crt") + "\n  key_file: " + filepath.Join(dir, "tls.key") +
			"\nbasic_auth_users:\n  prom: " + string(hash) + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "web.yml")
}

// serve runs listenAndServe with cfg until the test ends.
func serve(t *testing.T, cfg config, reg *prometheus.Registry, ready func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- listenAndServe(ctx, cfg, newMux(cfg, reg, ready, http.NotFoundHandler()), newProbeMux(ready), logger, func() time.Time { return time.Now().Add(10 * time.Second) })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listenAndServe: %v", err)
		}
	})
}

func get(t *testing.T, c *http.Client, url string, auth bool) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if auth {
		req.SetBasicAuth("prom", "secret")
	}
	var resp *http.Response
	var err error
	for range 50 { // the listeners come up within moments
		if resp, err = c.Do(req); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// With --web.config.file's TLS and basic auth, metrics need credentials;
// the probes on --web.probe-address answer without, in plain HTTP, and serve
// nothing else.
func TestWebConfigAndProbeAddress(t *testing.T) {
	cfg, err := parseFlags([]string{"--web.listen-address=" + freeAddr(t), "--web.probe-address=" + freeAddr(t), "--web.config.file=" + writeWebConfig(t)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	readyErr := errors.New("watchers not open yet")
	serve(t, cfg, prometheus.NewRegistry(), func() error { mu.Lock(); defer mu.Unlock(); return readyErr })
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	main, probes := "https://"+cfg.listenAddress, "http://"+cfg.probeAddress
	for _, tc := range []struct {
		url  string
		auth bool
		want int
	}{
		{main + "/metrics", false, http.StatusUnauthorized},
		{main + "/metrics", true, http.StatusOK},
		{main + "/healthz", false, http.StatusUnauthorized},
		{probes + "/healthz", false, http.StatusOK},
		{probes + "/readyz", false, http.StatusServiceUnavailable},
		{probes + "/metrics", false, http.StatusNotFound},
	} {
		if got := get(t, tlsClient, tc.url, tc.auth); got != tc.want {
			t.Errorf("GET %s (credentials %v): %d, want %d", tc.url, tc.auth, got, tc.want)
		}
	}
	if get(t, http.DefaultClient, "http://"+cfg.listenAddress+"/metrics", true) != http.StatusBadRequest {
		t.Error("plain HTTP on the TLS address answered")
	}
	mu.Lock()
	readyErr = nil
	mu.Unlock()
	if got := get(t, http.DefaultClient, probes+"/readyz", false); got != http.StatusOK {
		t.Errorf("GET /readyz once ready: %d", got)
	}
}

// blockingCollector holds each scrape until released.
type blockingCollector struct {
	in      chan struct{}
	release chan struct{}
}

func (b blockingCollector) Describe(chan<- *prometheus.Desc) {}
func (b blockingCollector) Collect(chan<- prometheus.Metric) {
	b.in <- struct{}{}
	<-b.release
}

// Scrapes past --web.max-requests are answered 503 at once.
func TestMaxRequests(t *testing.T) {
	cfg, err := parseFlags([]string{"--web.listen-address=" + freeAddr(t), "--web.max-requests=1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	b := blockingCollector{in: make(chan struct{}), release: make(chan struct{})}
	reg.MustRegister(b)
	serve(t, cfg, reg, func() error { return nil })
	first := make(chan int, 1)
	go func() { first <- get(t, http.DefaultClient, "http://"+cfg.listenAddress+"/metrics", false) }()
	<-b.in // the first scrape is being gathered
	if got := get(t, http.DefaultClient, "http://"+cfg.listenAddress+"/metrics", false); got != http.StatusServiceUnavailable {
		t.Errorf("second scrape at once: %d, want 503", got)
	}
	close(b.release)
	if got := <-first; got != http.StatusOK {
		t.Errorf("first scrape: %d", got)
	}
}

// Requests of the status page past --web.max-requests are answered 503 at
// once, as scrapes are.
func TestMaxRequestsStatusPage(t *testing.T) {
	cfg, err := parseFlags([]string{"--web.listen-address=" + freeAddr(t), "--web.max-requests=1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	in, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	page := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 { // the first one is held
			in <- struct{}{}
			<-release
		}
	})
	h := newMux(cfg, prometheus.NewRegistry(), func() error { return nil }, page)
	srv := httptest.NewServer(h)
	defer srv.Close()
	first := make(chan int, 1)
	go func() { first <- get(t, http.DefaultClient, srv.URL+"/status.json", false) }()
	<-in // the first request is being served
	if got := get(t, http.DefaultClient, srv.URL+"/status.json", false); got != http.StatusServiceUnavailable {
		t.Errorf("second request of the status page at once: %d, want 503", got)
	}
	close(release)
	if got := <-first; got != http.StatusOK {
		t.Errorf("first request: %d", got)
	}
}
