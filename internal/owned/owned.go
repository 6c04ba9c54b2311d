// Package owned creates, patches and deletes the ConfigMaps the exporter
// owns. Each carries app.kubernetes.io/managed-by=watchcache-exporter, so that
// an operator can find (and, if the exporter was killed, delete) them.
package owned

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// Labels of every owned object.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "watchcache-exporter"
	ComponentLabel = "app.kubernetes.io/component"
)

// Roles, the value of ComponentLabel.
const (
	RoleQuiet = "quiet"
	RoleNoise = "noise"
)

// ManagedBySelector selects every owned object.
const ManagedBySelector = ManagedByLabel + "=" + ManagedBy

func newConfigMap(ns, name, role string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels:    map[string]string{ManagedByLabel: ManagedBy, ComponentLabel: role},
			Annotations: map[string]string{
				"watchcache-exporter/purpose": "Written by watchcache-exporter to measure the kube-apiserver watch cache; deleted when it stops.",
			},
		},
	}
}

// Ensure gets ns/name, creating it when missing. created says whether it did.
func Ensure(ctx context.Context, c corev1client.ConfigMapsGetter, ns, name, role string) (rv uint64, created bool, err error) {
	cm, err := c.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = c.ConfigMaps(ns).Create(ctx, newConfigMap(ns, name, role), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // created meanwhile by someone else
			cm, err = c.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		} else if err == nil {
			created = true
		}
	}
	if err != nil {
		return 0, false, err
	}
	rv, err = ParseRV(cm.ResourceVersion)
	return rv, created, err
}

// Relist lists ns/name as a reflector would (a consistent list, selected by
// name) and returns the list's resourceVersion, the cluster's current one: a
// watch from it misses nothing and is not refused. An object's own
// resourceVersion is no such point: it may be older than the watch cache.
// A missing object is created first; created says whether it was.
func Relist(ctx context.Context, c corev1client.ConfigMapsGetter, ns, name, role string) (rv uint64, created bool, err error) {
	l, err := c.ConfigMaps(ns).List(ctx, metav1.ListOptions{FieldSelector: NameSelector(name)})
	if err != nil {
		return 0, false, err
	}
	if len(l.Items) == 0 {
		cm, err := c.ConfigMaps(ns).Create(ctx, newConfigMap(ns, name, role), metav1.CreateOptions{})
		if err == nil {
			rv, err = ParseRV(cm.ResourceVersion)
			return rv, true, err
		}
		if !apierrors.IsAlreadyExists(err) {
			return 0, false, err
		}
		return Relist(ctx, c, ns, name, role) // created meanwhile by another
	}
	rv, err = ParseRV(l.ResourceVersion)
	return rv, false, err
}

// SetKey merge-patches data[key]=value into ns/name and returns the new RV.
// It does not retry: a 429 or 5xx comes back to the caller, which decides
// when to try again (client-go would otherwise retry 429s by itself, hiding
// the throttling that we want to count).
func SetKey(ctx context.Context, c corev1client.CoreV1Interface, ns, name, key, value string) (uint64, error) {
	cm := &corev1.ConfigMap{}
	var err error
	if rc, ok := c.RESTClient().(*rest.RESTClient); ok && rc != nil {
		err = rc.Patch(types.MergePatchType).
			Namespace(ns).Resource("configmaps").Name(name).
			Body(MergePatch(key, value)).MaxRetries(0).Do(ctx).Into(cm)
	} else {
		// No HTTP below the client (client-go's fake clientset in hermetic
		// tests), so no retries to turn off: the typed patch.
		cm, err = c.ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, MergePatch(key, value), metav1.PatchOptions{})
	}
	if err != nil {
		return 0, err
	}
	return ParseRV(cm.ResourceVersion)
}

// MergePatch is the JSON merge patch that sets data[key]=value.
func MergePatch(key, value string) []byte {
	b := make([]byte, 0, 16+len(key)+len(value))
	b = append(b, `{"data":{`...)
	b = strconv.AppendQuote(b, key)
	b = append(b, ':')
	b = strconv.AppendQuote(b, value)
	return append(b, "}}"...)
}

// Delete deletes the named ConfigMaps of ns; missing ones are no error.
func Delete(ctx context.Context, c corev1client.ConfigMapsGetter, ns string, names ...string) error {
	var errs []error
	for _, name := range names {
		if err := c.ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete configmap %s/%s: %w", ns, name, err))
		}
	}
	return errors.Join(errs...)
}

// NameSelector is the field selector of the one object named name.
func NameSelector(name string) string {
	return fields.OneTermEqualSelector("metadata.name", name).String()
}

// ParseRV reads a resourceVersion. The apiserver's RVs are etcd revisions;
// the API calls them opaque, so anything else is an error worth seeing.
func ParseRV(s string) (uint64, error) {
	rv, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not a number: %w", s, err)
	}
	return rv, nil
}
