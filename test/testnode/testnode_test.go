package testnode_test

import (
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/watchcache/watchcache-exporter/test/testnode"
)

// TestNode starts the node and runs a pod on it under the restricted Pod
// Security level: the sandbox image, runc with seccomp, the bridge network
// and the kubernetes Service's EndpointSlice on the node's address.
func TestNode(t *testing.T) {
	testnode.Run(t, testnode.Options{}, func(t *testing.T, n *testnode.Node) {
		ctx := t.Context()
		cs := kubernetes.NewForConfigOrDie(n.Cluster.AdminConfig())
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: "default"},
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot:   ptr.To(true),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Containers: []corev1.Container{{
					Name:            "pause",
					Image:           testnode.PauseImage,
					ImagePullPolicy: corev1.PullNever,
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr.To(false),
						ReadOnlyRootFilesystem:   ptr.To(true),
						Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "pause", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Status.Phase == corev1.PodRunning {
				_, podNet, _ := net.ParseCIDR(testnode.PodCIDR)
				if ip := net.ParseIP(p.Status.PodIP); ip == nil || !podNet.Contains(ip) {
					t.Errorf("pod IP %q is not in %s", p.Status.PodIP, testnode.PodCIDR)
				}
				t.Logf("pod Running %s after creation, IP %s", time.Since(start).Round(10*time.Millisecond), p.Status.PodIP)
				break
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("pod not Running after 2 minutes: %+v; %s", p.Status, n.Logs())
			}
			time.Sleep(250 * time.Millisecond)
		}
		slices, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			t.Fatal(err)
		}
		var addrs []string
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				addrs = append(addrs, e.Addresses...)
			}
		}
		if len(addrs) != 1 || addrs[0] != testnode.NodeIP {
			t.Errorf("kubernetes EndpointSlice addresses %v, want [%s]", addrs, testnode.NodeIP)
		}
	})
}
