// Package testcluster runs a real etcd and kube-apiserver, built by
// hack/kube, as child processes on loopback, for tests and for the local demo.
package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BinDirEnv names the environment variable that points at the folder holding
// kube-apiserver and etcd. Without it the repository's bin/ is used.
const BinDirEnv = "WATCHCACHE_KUBE_BIN"

// ServiceCIDR is the Service IP range; its first address is the kubernetes
// Service's, which the serving certificate is valid for.
const ServiceCIDR = "10.0.0.0/24"

// kubernetesServiceIP is ServiceCIDR's first address.
func kubernetesServiceIP() net.IP {
	_, n, _ := net.ParseCIDR(ServiceCIDR)
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1)
}

// BuildHint says how to get the binaries; it ends every "missing" message.
const BuildHint = "build them with `make kube-bin` (hack/kube/build.sh, about 8 minutes the first time) or point " + BinDirEnv + " at a folder that holds them"

// Options configure a Cluster. The zero value is usable.
type Options struct {
	// BinDir holds kube-apiserver and etcd; default: FindBinDir().
	BinDir string
	// Dir receives certificates, etcd data and process logs; default: a new
	// temporary folder.
	Dir string
	// APIServerFlags are added to the first apiserver's flags (later ones
	// win), e.g. "--request-timeout=2m".
	APIServerFlags []string
	// Port of the first apiserver; default: a free one.
	Port int
	// Address the apiservers bind to and advertise; default 127.0.0.1. Any
	// other address (one of a network namespace the test made) is published
	// in the kubernetes EndpointSlice by the lease endpoint reconciler, so
	// that pods reach the apiserver through the Service.
	Address string
	// OtherAddresses are more addresses of the same kind, for apiservers
	// added with AddAPIServerAt; the serving certificate is valid for them
	// too.
	OtherAddresses []string
	// Slots is how many of the machine's test slots Start takes for the
	// cluster's test (see TakeSlots): default 1, Alone for all of them.
	Slots int
	// EventsEtcd keeps events in an etcd of their own
	// (--etcd-servers-overrides=/events#...), as large clusters do: their
	// resourceVersions are that etcd's revisions, not the main one's.
	EventsEtcd bool
}

// Cluster is one etcd (and one for events with Options.EventsEtcd) and one
// or more kube-apiservers that share it.
type Cluster struct {
	dir        string
	bin        string
	adminToken string
	addrs      []string // the certificate's; the first is the first apiserver's
	pki        *pki
	etcd       *Process
	etcdURL    string
	eventsEtcd *Process // nil unless Options.EventsEtcd
	eventsURL  string

	mu         sync.Mutex
	apiservers []*APIServer
}

// APIServer is one kube-apiserver process with its own watch cache.
type APIServer struct {
	c     *Cluster
	index int
	addr  string
	port  int
	flags []string

	mu   sync.Mutex
	proc *Process
}

// FindBinDir returns $WATCHCACHE_KUBE_BIN, or the bin/ folder of the
// repository that holds the working directory.
func FindBinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w; set %s", err, BinDirEnv)
	}
	return filepath.Join(root, "bin"), nil
}

// RepoRoot is the top folder of the repository that holds the working
// directory: the first one above it with hack/kube/build.sh.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "kube", "build.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no repository with hack/kube/build.sh above the working directory")
		}
		dir = parent
	}
}

// CheckBinaries returns an error that names each missing binary and says how
// to build it.
func CheckBinaries(binDir string) error {
	var missing []string
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if fi, err := os.Stat(filepath.Join(binDir, name)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(binDir, name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("control-plane binaries missing: %s; %s", strings.Join(missing, ", "), BuildHint)
	}
	return nil
}

// New starts etcd and one kube-apiserver and waits until both are ready.
// On error nothing is left running.
func New(ctx context.Context, opts Options) (_ *Cluster, err error) {
	bin := opts.BinDir
	if bin == "" {
		if bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	if err := CheckBinaries(bin); err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "testcluster-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	addr := opts.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	addrs := append([]string{addr}, opts.OtherAddresses...)
	var ips []net.IP
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil {
			return nil, fmt.Errorf("address %q is not an IP address", a)
		}
		ips = append(ips, ip)
	}
	c := &Cluster{dir: dir, bin: bin, adminToken: hex.EncodeToString(token), addrs: addrs}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if c.pki, err = writePKI(dir, c.adminToken, ips); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if c.etcd, c.etcdURL, err = startEtcd(ctx, c.bin, c.dir, "etcd"); err != nil {
		return nil, err
	}
	flags := opts.APIServerFlags
	if opts.EventsEtcd {
		if c.eventsEtcd, c.eventsURL, err = startEtcd(ctx, c.bin, c.dir, "etcd-events"); err != nil {
			return nil, err
		}
		flags = append([]string{"--etcd-servers-overrides=/events#" + c.eventsURL}, flags...)
	}
	if _, err := c.addAPIServer(ctx, addr, opts.Port, flags); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir is the folder with certificates, etcd data and the logs etcd.log and
// apiserver-N.log.
func (c *Cluster) Dir() string { return c.dir }

// APIServer returns the first apiserver.
func (c *Cluster) APIServer() *APIServer { return c.APIServers()[0] }

// APIServers returns every apiserver started so far, in order.
func (c *Cluster) APIServers() []*APIServer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*APIServer(nil), c.apiservers...)
}

// AdminConfig is a system:masters config for the first apiserver.
func (c *Cluster) AdminConfig() *rest.Config { return c.APIServer().AdminConfig() }

// AddAPIServer starts one more kube-apiserver on the same etcd; it has a
// watch cache of its own.
func (c *Cluster) AddAPIServer(ctx context.Context, extraFlags ...string) (*APIServer, error) {
	return c.addAPIServer(ctx, c.addrs[0], 0, extraFlags)
}

// AddAPIServerAt starts one more kube-apiserver on the same etcd, bound to
// and advertising addr, one of Options.OtherAddresses, on the first
// apiserver's port: replicas behind one Service share their port, as the
// kubernetes EndpointSlice has one.
func (c *Cluster) AddAPIServerAt(ctx context.Context, addr string, extraFlags ...string) (*APIServer, error) {
	if !slices.Contains(c.addrs[1:], addr) {
		return nil, fmt.Errorf("address %q is not one of Options.OtherAddresses %v", addr, c.addrs[1:])
	}
	for _, a := range c.APIServers() {
		if a.addr == addr {
			return nil, fmt.Errorf("address %s is taken by %s", addr, a.Name())
		}
	}
	return c.addAPIServer(ctx, addr, c.APIServer().port, extraFlags)
}

func (c *Cluster) addAPIServer(ctx context.Context, addr string, port int, extraFlags []string) (*APIServer, error) {
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	a := &APIServer{c: c, index: len(c.apiservers), addr: addr, port: port}
	c.apiservers = append(c.apiservers, a)
	c.mu.Unlock()
	// Loopback cannot be advertised through the endpoint reconciler.
	reconciler := "none"
	if !net.ParseIP(addr).IsLoopback() {
		reconciler = "lease"
	}
	a.flags = append([]string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=" + addr,
		"--advertise-address=" + addr,
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.dir, fmt.Sprintf("apiserver-%d", a.index)),
		"--tls-cert-file=" + c.pki.certFile,
		"--tls-private-key-file=" + c.pki.keyFile,
		"--token-auth-file=" + c.pki.tokensFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.pki.saKeyFile,
		"--service-account-signing-key-file=" + c.pki.saKeyFile,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--endpoint-reconciler-type=" + reconciler,
		"--allow-privileged=true",
	}, extraFlags...)
	return a, a.Start(ctx)
}

// startEtcd starts an etcd called name, with its data in dir/name and its
// log in dir/name.log, and waits until it is healthy.
func startEtcd(ctx context.Context, bin, dir, name string) (*Process, string, error) {
	clientPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	peerPort, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p := &Process{
		Name: name,
		Path: filepath.Join(bin, "etcd"),
		Args: []string{
			"--name=default",
			"--data-dir=" + filepath.Join(dir, name),
			"--listen-client-urls=" + url,
			"--advertise-client-urls=" + url,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			// Test data: durability is not worth an fsync per write.
			"--unsafe-no-fsync",
		},
		LogPath: filepath.Join(dir, name+".log"),
	}
	if err := p.Start(); err != nil {
		return nil, "", err
	}
	return p, url, WaitReady(ctx, p, http.DefaultClient, url+"/health", "", 30*time.Second)
}

// Stop stops every apiserver, then etcd. The folder stays; RemoveDir removes it.
func (c *Cluster) Stop() error {
	var errs []error
	for _, a := range c.APIServers() {
		errs = append(errs, a.Stop())
	}
	for _, p := range []*Process{c.etcd, c.eventsEtcd} {
		if p != nil {
			errs = append(errs, p.Stop(10*time.Second))
		}
	}
	return errors.Join(errs...)
}

// RestartEtcd stops etcd and starts it again on the same data and port; the
// apiservers keep running, and reconnect.
func (c *Cluster) RestartEtcd(ctx context.Context) error {
	if err := c.etcd.Stop(10 * time.Second); err != nil {
		return err
	}
	c.etcd = &Process{Name: c.etcd.Name, Path: c.etcd.Path, Args: c.etcd.Args, LogPath: c.etcd.LogPath}
	if err := c.etcd.Start(); err != nil {
		return err
	}
	return WaitReady(ctx, c.etcd, http.DefaultClient, c.etcdURL+"/health", "", 30*time.Second)
}

// EtcdPID is etcd's process ID, for measuring its CPU.
func (c *Cluster) EtcdPID() int { return c.etcd.cmd.Process.Pid }

// RemoveDir removes the cluster's folder; call it after Stop.
func (c *Cluster) RemoveDir() error { return os.RemoveAll(c.dir) }

// URL is the apiserver's https address.
func (a *APIServer) URL() string {
	return "https://" + net.JoinHostPort(a.addr, strconv.Itoa(a.port))
}

// CAFile is the CA that signed the apiservers' serving certificate.
func (c *Cluster) CAFile() string { return c.pki.caFile }

// Name is apiserver-N, the name of its log file without ".log".
func (a *APIServer) Name() string { return fmt.Sprintf("apiserver-%d", a.index) }

// LogPath is the file that receives the apiserver's output across restarts.
func (a *APIServer) LogPath() string { return filepath.Join(a.c.dir, a.Name()+".log") }

// AdminConfig is a system:masters config for this apiserver.
func (a *APIServer) AdminConfig() *rest.Config {
	return &rest.Config{
		Host:            a.URL(),
		BearerToken:     a.c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: a.c.pki.caPEM},
	}
}

// Start starts the apiserver and waits for /readyz; Restart is Stop then Start.
func (a *APIServer) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc != nil && a.proc.Running() {
		return fmt.Errorf("%s is already running", a.Name())
	}
	a.proc = &Process{
		Name:    a.Name(),
		Path:    filepath.Join(a.c.bin, "kube-apiserver"),
		Args:    a.flags,
		LogPath: a.LogPath(),
	}
	if err := a.proc.Start(); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(a.AdminConfig())
	if err != nil {
		return err
	}
	return WaitReady(ctx, a.proc, hc, a.URL()+"/readyz", a.c.adminToken, 90*time.Second)
}

// PID is the running apiserver's process ID, for measuring its CPU.
func (a *APIServer) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proc.cmd.Process.Pid
}

// Stop stops the apiserver; etcd keeps its data.
func (a *APIServer) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil {
		return nil
	}
	return a.proc.Stop(15 * time.Second)
}

// Restart stops and starts the apiserver. Its watch cache is rebuilt from a
// fresh list, so every resourceVersion from before is refused with 410.
func (a *APIServer) Restart(ctx context.Context) error {
	if err := a.Stop(); err != nil {
		return err
	}
	return a.Start(ctx)
}

// RestartWith restarts the apiserver with extraFlags added to its flags
// (later ones win), for this start and the next.
func (a *APIServer) RestartWith(ctx context.Context, extraFlags ...string) error {
	if err := a.Stop(); err != nil {
		return err
	}
	a.mu.Lock()
	a.flags = append(a.flags, extraFlags...)
	a.mu.Unlock()
	return a.Start(ctx)
}

// ServiceAccountConfig creates the ServiceAccount ns/name if missing and
// returns a config that authenticates with a fresh token of it.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, ns, name string) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create serviceaccount %s/%s: %w", ns, name, err)
	}
	expiry := int64(24 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for serviceaccount %s/%s: %w", ns, name, err)
	}
	cfg := c.AdminConfig()
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// WriteKubeconfig writes cfg (host, CA, token) as a kubeconfig file.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testcluster"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["testcluster"] = &clientcmdapi.Context{Cluster: "testcluster", AuthInfo: "user", Namespace: "default"}
	kc.CurrentContext = "testcluster"
	return clientcmd.WriteToFile(*kc, path)
}

// WaitReady polls url (with token as a bearer token, if given) until it
// answers 200, p exits, or timeout passes.
func WaitReady(ctx context.Context, p *Process, hc *http.Client, url, token string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v); see %s", p.Name, err, p.LogPath)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last answer: %s); see %s", p.Name, timeout, last, p.LogPath)
		case <-tick.C:
		}
	}
}

// FreePort is a free port on loopback, reserved for this process until it
// exits: control planes of other test binaries start side by side, and a
// port that was free when picked must not be handed to another before its
// server binds it. Ports come from below the kernel's ephemeral range
// (32768 and up by default), which outgoing connections take theirs from.
func FreePort() (int, error) {
	for range 1000 {
		port := 20000 + mathrand.IntN(12000)
		f, err := tryLock("port-" + strconv.Itoa(port))
		if err != nil {
			return 0, err
		}
		if f == nil {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		reservedPorts.Lock()
		reservedPorts.files = append(reservedPorts.files, f)
		reservedPorts.Unlock()
		return port, nil
	}
	return 0, errors.New("no free port between 20000 and 32000 on 127.0.0.1")
}

// reservedPorts hold the locks of FreePort's ports for the process's life.
var reservedPorts struct {
	sync.Mutex
	files []*os.File
}
