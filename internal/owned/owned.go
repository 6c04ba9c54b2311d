// Package owned creates, writes and deletes the ConfigMaps the exporter owns,
// and only those. An object is owned when it carries the managed-by label and
// the owner annotation naming this exporter (its namespace and quiet name, so
// that the next start, or a standby taking over, adopts it). A same-named
// object without them is somebody else's: never written, never deleted.
package owned

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/pause"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// Marks of every owned object.
const (
	ManagedByLabel  = "app.kubernetes.io/managed-by"
	ManagedBy       = "watchcache-exporter"
	ComponentLabel  = "app.kubernetes.io/component"
	OwnerAnnotation = "watchcache-exporter/owner"
)

// The record, on quiet, of the noise objects the leader makes: their
// prefix and how many. The next leader deletes what the record names and it
// does not make (a run killed with more objects, or another prefix).
const (
	NoisePrefixAnnotation  = "watchcache-exporter/noise-prefix"
	NoiseObjectsAnnotation = "watchcache-exporter/noise-objects"
)

// Roles, the value of ComponentLabel.
const (
	RoleQuiet = "quiet"
	RoleNoise = "noise"
)

// ManagedBySelector selects every owned object.
const ManagedBySelector = ManagedByLabel + "=" + ManagedBy

// ErrNotOwned is the error of a write or delete refused because the object
// does not carry this exporter's marks.
var ErrNotOwned = errors.New("not the exporter's")

// maxTries bounds the read-and-write rounds of one Touch or Delete that
// conflicts with other writers.
const maxTries = 5

// recheckEvery is how often a lost object is looked at again.
const recheckEvery = 30 * time.Second

// Store is the process-wide record of which of the exporter's names are its
// own; its methods take the client to use, as each apiserver has its own.
type Store struct {
	ns, owner string
	log       logr.Logger
	now       func() time.Time
	lostGauge *prometheus.GaugeVec    // no labels: absent on a standby
	jsonPatch []byte                  // the tests of the noise patch, up to its value
	refs      []metav1.OwnerReference // of the objects created; see OwnedBy
	patchURLs sync.Map                // name -> the URL of its patch (*url.URL)

	mu   sync.Mutex
	lost map[string]time.Time // name -> when last checked
}

// NewStore is the Store of the objects of the exporter whose quiet ConfigMap
// is ns/quiet.
func NewStore(ns, quiet string, reg prometheus.Registerer, log logr.Logger, now func() time.Time) *Store {
	s := &Store{
		ns: ns, owner: ns + "/" + quiet, log: log, now: now, lost: map[string]time.Time{},
		lostGauge: promauto.With(reg).NewGaugeVec(promopts.Gauge("exporter_objects_lost",
			"ConfigMaps of the exporter's names that no longer carry its marks (label "+ManagedBySelector+", annotation "+OwnerAnnotation+"): no longer written or deleted, until their marks are back or they are deleted. Absent on a standby, which reads none of them."), nil),
	}
	s.jsonPatch = fmt.Appendf(nil, `[{"op":"test","path":"/metadata/labels/%s","value":%q},{"op":"test","path":"/metadata/annotations/%s","value":%q},{"op":"add","path":"/data","value":{"seq":`,
		escapePointer(ManagedByLabel), ManagedBy, escapePointer(OwnerAnnotation), s.owner)
	return s
}

// SetLeading starts (true) or ends what the Store knows of its objects: a
// leader reads them and counts the lost ones from 0; a standby reads none,
// and so exports no count.
func (s *Store) SetLeading(leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.lost)
	if leading {
		s.lostGauge.WithLabelValues().Set(0)
	} else {
		s.lostGauge.Reset()
	}
}

// Owner is the owner annotation's value.
func (s *Store) Owner() string { return s.owner }

// Owns says whether cm carries this exporter's marks.
func (s *Store) Owns(cm *corev1.ConfigMap) bool {
	return cm.Labels[ManagedByLabel] == ManagedBy && cm.Annotations[OwnerAnnotation] == s.owner
}

func (s *Store) newConfigMap(name, role string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       s.ns,
			OwnerReferences: s.refs,
			Labels:          map[string]string{ManagedByLabel: ManagedBy, ComponentLabel: role},
			Annotations: map[string]string{
				OwnerAnnotation:               s.owner,
				"watchcache-exporter/purpose": "Written by watchcache-exporter to measure the kube-apiserver watch cache; deleted when it stops.",
			},
		},
	}
	if role == RoleNoise {
		cm.Data = map[string]string{"seq": "0"}
	}
	return cm
}

// NotOwned returns those of names that exist without this exporter's marks;
// missing ones are fine (they will be created). It reads up to 8 at once, so
// that a thousand names take a second at start, not the client's QPS.
func (s *Store) NotOwned(ctx context.Context, c kube.ConfigMapsGetter, names ...string) ([]string, error) {
	theirs := make([]bool, len(names))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, name := range names {
		g.Go(func() error {
			cm, err := c.ConfigMaps(s.ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("get configmap %s/%s: %w", s.ns, name, err)
			}
			theirs[i] = !s.Owns(cm)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []string
	for i, t := range theirs {
		if t {
			out = append(out, names[i])
		}
	}
	return out, nil
}

// found and lostNow record what a read showed of name, logging changes.
func (s *Store) found(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lost[name]; ok {
		delete(s.lost, name)
		s.lostGauge.WithLabelValues().Set(float64(len(s.lost)))
		s.log.Info("ConfigMap is the exporter's again: writing it", "namespace", s.ns, "name", name)
	}
}

func (s *Store) lostNow(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lost[name]; !ok {
		s.log.Info("ConfigMap lost the exporter's marks: no longer writing or deleting it; delete it or restore its marks for the exporter to take it back",
			"namespace", s.ns, "name", name, "label", ManagedBySelector, "annotation", OwnerAnnotation+"="+s.owner)
	}
	s.lost[name] = s.now()
	s.lostGauge.WithLabelValues().Set(float64(len(s.lost)))
	return fmt.Errorf("configmap %s/%s: %w", s.ns, name, ErrNotOwned)
}

// check records what cm says of name's ownership and returns ErrNotOwned
// for an object that is not ours.
func (s *Store) check(name string, cm *corev1.ConfigMap) error {
	if !s.Owns(cm) {
		return s.lostNow(name)
	}
	s.found(name)
	return nil
}

// Observe records what a read of cm (a watch event) shows of its marks.
func (s *Store) Observe(cm *corev1.ConfigMap) { _ = s.check(cm.Name, cm) }

// Lost lists the names that lost their marks, sorted.
func (s *Store) Lost() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.lost))
	for n := range s.lost {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Ready fails while any object is lost.
func (s *Store) Ready() error {
	if lost := s.Lost(); len(lost) > 0 {
		return fmt.Errorf("configmaps %s of namespace %s lost the exporter's marks and are no longer written", strings.Join(lost, ","), s.ns)
	}
	return nil
}

// Usable says whether name may be written now. A lost name is looked at again
// every 30 s, and recreated if it was deleted.
func (s *Store) Usable(ctx context.Context, c kube.ConfigMapsGetter, name, role string) bool {
	s.mu.Lock()
	checked, lost := s.lost[name]
	due := lost && s.now().Sub(checked) >= recheckEvery
	if due {
		s.lost[name] = s.now()
	}
	s.mu.Unlock()
	if !lost {
		return true
	}
	if !due {
		return false
	}
	_, _, err := s.Ensure(ctx, c, name, role)
	return err == nil
}

// Ensure gets name, creating it when missing. created says whether it did.
// An existing object that is not ours is ErrNotOwned.
func (s *Store) Ensure(ctx context.Context, c kube.ConfigMapsGetter, name, role string) (rv uint64, created bool, err error) {
	cm, err := c.ConfigMaps(s.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = c.ConfigMaps(s.ns).Create(ctx, s.newConfigMap(name, role), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // created meanwhile by someone else
			cm, err = c.ConfigMaps(s.ns).Get(ctx, name, metav1.GetOptions{})
		} else if err == nil {
			created = true
		}
	}
	if err != nil {
		return 0, false, err
	}
	if err := s.check(name, cm); err != nil {
		return 0, false, err
	}
	rv, err = ParseRV(cm.ResourceVersion)
	return rv, created, err
}

// Relist lists name as a reflector would (a consistent list, selected by
// name) and returns the list's resourceVersion, the cluster's current one: a
// watch from it misses nothing and is not refused. An object's own
// resourceVersion is no such point: it may be older than the watch cache.
// A missing object is created first; created says whether it was. An object
// that is not ours is only read: the RV comes back with ErrNotOwned. When the
// create finds the object the list did not (made meanwhile by another), it
// lists again, a few times with a growing pause (relistBackoff), then gives
// up with an error that says so.
func (s *Store) Relist(ctx context.Context, c kube.ConfigMapsGetter, name, role string) (rv uint64, created bool, err error) {
	backoff := relistBackoff
	for {
		l, err := c.ConfigMaps(s.ns).List(ctx, metav1.ListOptions{FieldSelector: NameSelector(name)})
		if err != nil {
			return 0, false, err
		}
		if len(l.Items) > 0 {
			if rv, err = ParseRV(l.ResourceVersion); err != nil {
				return 0, false, err
			}
			return rv, false, s.check(name, &l.Items[0])
		}
		cm, err := c.ConfigMaps(s.ns).Create(ctx, s.newConfigMap(name, role), metav1.CreateOptions{})
		if err == nil {
			s.found(name)
			rv, err = ParseRV(cm.ResourceVersion)
			return rv, true, err
		}
		if !apierrors.IsAlreadyExists(err) {
			return 0, false, err
		}
		if backoff.Steps <= 1 {
			return 0, false, fmt.Errorf("configmap %s/%s: a list finds no such object and a create finds it, %d times: %w", s.ns, name, relistBackoff.Steps, err)
		}
		if err := pause.For(ctx, backoff.Step()); err != nil {
			return 0, false, err
		}
	}
}

// relistBackoff paces Relist's lists after a create found the object.
var relistBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 5}

// SetSeq writes data={"seq": value} to the noise object name and returns the
// new RV. The JSON patch tests the marks first, so that the write happens
// only if the object is ours at that moment; an object that is not is
// ErrNotOwned. It does not retry: a 429 or 5xx comes back to the caller,
// which decides when to try again (client-go would otherwise retry 429s by
// itself, hiding the throttling that we want to count).
func (s *Store) SetSeq(ctx context.Context, c kube.Core, name, value string) (uint64, error) {
	body := s.seqPatch(value)
	var rv uint64
	var err error
	if rc, ok := c.RESTClient().(*rest.RESTClient); ok && rc != nil && rc.Client != nil {
		rv, err = s.patch(ctx, rc, name, body)
	} else {
		// No HTTP below the client (client-go's fake clientset in hermetic
		// tests), so no retries to turn off: the typed patch.
		var cm *corev1.ConfigMap
		if cm, err = c.ConfigMaps(s.ns).Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}); err == nil {
			rv, err = ParseRV(cm.ResourceVersion)
		}
	}
	if err != nil {
		// A failed test is 422 from the apiserver (a plain error from the
		// fake clientset): read the object to tell lost marks from others.
		var status apierrors.APIStatus
		if apierrors.IsInvalid(err) || !errors.As(err, &status) {
			if got, gerr := c.ConfigMaps(s.ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil && !s.Owns(got) {
				return 0, s.lostNow(name)
			}
		}
		return 0, err
	}
	return rv, nil
}

func (s *Store) seqPatch(value string) []byte {
	b := make([]byte, 0, len(s.jsonPatch)+len(value)+8)
	b = append(b, s.jsonPatch...)
	b = strconv.AppendQuote(b, value)
	return append(b, "}}]"...)
}

// Touch sets data[key]=value on name if it is ours: a read, then an update
// that the read's resourceVersion guards, so that an object whose marks go
// between the two is not written. It returns the new RV; an object that is
// not ours is ErrNotOwned, and a missing one the NotFound error.
func (s *Store) Touch(ctx context.Context, c kube.ConfigMapsGetter, name, key, value string) (uint64, error) {
	for try := 1; ; try++ {
		cm, err := c.ConfigMaps(s.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if err := s.check(name, cm); err != nil {
			return 0, err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = value
		cm, err = c.ConfigMaps(s.ns).Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && try < maxTries {
			continue // changed since the read: read again
		}
		if err != nil {
			return 0, err
		}
		return ParseRV(cm.ResourceVersion)
	}
}

// Recorded reads the record of noise objects on quiet, creating quiet when
// missing: the names it holds (none when quiet has no record).
func (s *Store) Recorded(ctx context.Context, c kube.ConfigMapsGetter, quiet string) ([]string, error) {
	cm, err := c.ConfigMaps(s.ns).Get(ctx, quiet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// A quiet made now holds no record.
		_, _, err := s.Ensure(ctx, c, quiet, RoleQuiet)
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if err := s.check(quiet, cm); err != nil {
		return nil, err
	}
	prefix, count := cm.Annotations[NoisePrefixAnnotation], cm.Annotations[NoiseObjectsAnnotation]
	if prefix == "" && count == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 || n > maxRecorded {
		return nil, fmt.Errorf("configmap %s/%s: annotation %s=%q is not a count of objects", s.ns, quiet, NoiseObjectsAnnotation, count)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	return names, nil
}

// maxRecorded bounds the count a record may hold: --load.objects' limit.
const maxRecorded = 1000

// Record writes the record of noise objects on quiet, if ours: a read,
// then an update the read's resourceVersion guards.
func (s *Store) Record(ctx context.Context, c kube.ConfigMapsGetter, quiet, prefix string, count int) error {
	for try := 1; ; try++ {
		cm, err := c.ConfigMaps(s.ns).Get(ctx, quiet, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := s.check(quiet, cm); err != nil {
			return err
		}
		if cm.Annotations[NoisePrefixAnnotation] == prefix && cm.Annotations[NoiseObjectsAnnotation] == strconv.Itoa(count) {
			return nil
		}
		cm.Annotations[NoisePrefixAnnotation], cm.Annotations[NoiseObjectsAnnotation] = prefix, strconv.Itoa(count)
		_, err = c.ConfigMaps(s.ns).Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && try < maxTries {
			continue
		}
		return err
	}
}

// Delete deletes those of names that are ours, each with a precondition on
// the UID and resourceVersion it was read with, so that an object replaced
// or taken over since the read is not deleted. Missing ones are no error;
// ones not ours are left, and logged. left names those it could not delete.
func (s *Store) Delete(ctx context.Context, c kube.ConfigMapsGetter, names ...string) (left []string, err error) {
	errs := make([]error, len(names))
	// A few at a time, each read then deleted before the next, so that the
	// objects go one after another within the stop's budget, and a
	// thousand of them are a thousand short tasks, not a thousand
	// goroutines at once; against an apiserver that does not answer, each
	// waits for the same deadline.
	var g errgroup.Group
	g.SetLimit(deleteAtOnce)
	for i, name := range names {
		g.Go(func() error {
			if err := s.delete(ctx, c, name); err != nil {
				errs[i] = fmt.Errorf("delete configmap %s/%s: %w", s.ns, name, err)
			}
			return nil
		})
	}
	_ = g.Wait()
	for i, err := range errs {
		if err != nil {
			left = append(left, names[i])
		}
	}
	return left, errors.Join(errs...)
}

// deleteAtOnce is how many objects Delete deletes at a time.
const deleteAtOnce = 8

func (s *Store) delete(ctx context.Context, c kube.ConfigMapsGetter, name string) error {
	for try := 1; ; try++ {
		cm, err := c.ConfigMaps(s.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !s.Owns(cm) {
			s.log.Info("left a ConfigMap that is not the exporter's", "namespace", s.ns, "name", name)
			return nil
		}
		err = c.ConfigMaps(s.ns).Delete(ctx, name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion},
		})
		if apierrors.IsConflict(err) && try < maxTries {
			continue // written since the read: read again
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
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

// escapePointer escapes a map key for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
