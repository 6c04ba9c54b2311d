// Package typed serves client-go's typed clients, its fake clientset's in
// hermetic tests, through the exporter's own client interfaces
// (internal/kube), whose methods they all have.
package typed

import (
	"context"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/watchcache/watchcache-exporter/internal/kube"
)

// Core serves c as a kube.Core.
func Core(c corev1client.CoreV1Interface) kube.Core { return core{c} }

type core struct{ corev1client.CoreV1Interface }

func (c core) ConfigMaps(namespace string) kube.ConfigMaps {
	return c.CoreV1Interface.ConfigMaps(namespace)
}

// Leases serves c as a kube.LeasesGetter.
func Leases(c coordinationv1client.CoordinationV1Interface) kube.LeasesGetter { return leases{c} }

type leases struct {
	coordinationv1client.CoordinationV1Interface
}

func (c leases) Leases(namespace string) kube.Leases {
	return c.CoordinationV1Interface.Leases(namespace)
}

// Reviews serves c as kube.Reviews.
func Reviews(c authorizationv1client.AuthorizationV1Interface) kube.Reviews { return reviews{c} }

type reviews struct {
	authorizationv1client.AuthorizationV1Interface
}

func (c reviews) CreateRulesReview(ctx context.Context, r *authorizationv1.SelfSubjectRulesReview) (*authorizationv1.SelfSubjectRulesReview, error) {
	return c.SelfSubjectRulesReviews().Create(ctx, r, metav1.CreateOptions{})
}

func (c reviews) CreateAccessReview(ctx context.Context, r *authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error) {
	return c.SelfSubjectAccessReviews().Create(ctx, r, metav1.CreateOptions{})
}
