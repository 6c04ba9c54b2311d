// Package fakecache is client-go's fake clientset dressed as an apiserver
// with a watch cache, for the hermetic tests of the measurement's logic: it
// numbers writes with resourceVersions, refuses watches from RVs older than
// its oldest with 410 "too old resource version: R (O)", and hands each
// long-lived watch to the test to drive. It knows nothing of the real
// cache's sizing: the tests of the numbers run against the real apiserver.
package fakecache

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
)

// Watch is one long-lived watch the exporter opened.
type Watch struct {
	*watch.RaceFreeFakeWatcher
	Opts   metav1.ListOptions
	Opened time.Time
}

// Server is the fake. Its fields are read and set under Lock.
type Server struct {
	sync.Mutex
	Client *fake.Clientset
	RV     uint64 // the newest RV
	Oldest uint64 // O: watches from older RVs are refused
	// Capacity, when set, makes the cache hold the last Capacity RVs: every
	// write moves Oldest up to RV-Capacity.
	Capacity uint64
	// ProbeErr, when set, answers the short watches (the probes) from the
	// RVs for which it returns an error.
	ProbeErr func(rv string) error
	// PatchErr, when set, answers every patch.
	PatchErr func(name string) error
	objects  map[string]*corev1.ConfigMap
	uid      int
	// Watches are the long-lived watches (those with timeoutSeconds), by
	// AllowWatchBookmarks, newest last; OnWatch sees each as it opens.
	Watches map[bool][]*Watch
	OnWatch func(*Watch)
}

// New is an empty Server at RV start whose cache serves every RV from start.
func New(start uint64) *Server {
	s := &Server{Client: fake.NewClientset(), RV: start, Oldest: start, objects: map[string]*corev1.ConfigMap{}, Watches: map[bool][]*Watch{}}
	s.Client.PrependReactor("*", "configmaps", s.react)
	s.Client.PrependWatchReactor("configmaps", s.watch)
	return s
}

// CoreV1 is the client the exporter takes.
func (s *Server) CoreV1() corev1client.CoreV1Interface { return s.Client.CoreV1() }

// Write advances the RV by n writes of others and returns the new RV.
func (s *Server) Write(n uint64) uint64 {
	s.Lock()
	defer s.Unlock()
	s.advance(n)
	return s.RV
}

// Restart rebuilds the cache from a list at the newest RV, as an apiserver's
// restart does: every older RV is refused.
func (s *Server) Restart() {
	s.Lock()
	defer s.Unlock()
	s.Oldest = s.RV
}

func (s *Server) advance(n uint64) {
	s.RV += n
	if s.Capacity > 0 && s.RV > s.Capacity {
		s.Oldest = max(s.Oldest, s.RV-s.Capacity)
	}
}

// Exists says whether the ConfigMap exists.
func (s *Server) Exists(name string) bool {
	s.Lock()
	defer s.Unlock()
	return s.objects[name] != nil
}

// Delete deletes a ConfigMap as somebody else would, and sends DELETED to
// the open long-lived watches.
func (s *Server) Delete(name string) {
	s.Lock()
	cm := s.objects[name]
	delete(s.objects, name)
	s.advance(1)
	rv := s.RV
	var ws []*Watch
	for _, l := range s.Watches {
		ws = append(ws, l...)
	}
	s.Unlock()
	if cm == nil {
		return
	}
	cm = cm.DeepCopy()
	cm.ResourceVersion = strconv.FormatUint(rv, 10)
	for _, w := range ws {
		if !w.IsStopped() {
			w.Delete(cm)
		}
	}
}

func (s *Server) react(a k8stesting.Action) (bool, runtime.Object, error) {
	s.Lock()
	defer s.Unlock()
	gr := corev1.Resource("configmaps")
	switch a.GetVerb() {
	case "list":
		a := a.(k8stesting.ListAction)
		l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(s.RV, 10)}}
		for name, cm := range s.objects {
			if f := a.GetListRestrictions().Fields; f.Empty() || f.Matches(fieldsOf(name)) {
				l.Items = append(l.Items, *cm.DeepCopy())
			}
		}
		return true, l, nil
	case "create":
		cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		if s.objects[cm.Name] != nil {
			return true, nil, apierrors.NewAlreadyExists(gr, cm.Name)
		}
		s.advance(1)
		s.uid++
		cm.UID = types.UID(fmt.Sprintf("uid-%d", s.uid))
		cm.ResourceVersion = strconv.FormatUint(s.RV, 10)
		s.objects[cm.Name] = cm
		return true, cm.DeepCopy(), nil
	case "update":
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		old := s.objects[cm.Name]
		if old == nil {
			return true, nil, apierrors.NewNotFound(gr, cm.Name)
		}
		if cm.ResourceVersion != old.ResourceVersion {
			return true, nil, apierrors.NewConflict(gr, cm.Name, fmt.Errorf("resourceVersion %s, the object is at %s", cm.ResourceVersion, old.ResourceVersion))
		}
		s.advance(1)
		cm.UID = old.UID
		cm.ResourceVersion = strconv.FormatUint(s.RV, 10)
		s.objects[cm.Name] = cm
		return true, cm.DeepCopy(), nil
	case "patch":
		a := a.(k8stesting.PatchAction)
		if s.PatchErr != nil {
			if err := s.PatchErr(a.GetName()); err != nil {
				return true, nil, err
			}
		}
		cm := s.objects[a.GetName()]
		if cm == nil {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		patched, err := applyPatch(cm, a.GetPatchType(), a.GetPatch())
		if err != nil {
			// As the apiserver answers a failed JSON patch test.
			return true, nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", gr, a.GetName(), err.Error(), 0, false)
		}
		s.advance(1)
		patched.ResourceVersion = strconv.FormatUint(s.RV, 10)
		s.objects[a.GetName()] = patched
		return true, patched.DeepCopy(), nil
	case "delete":
		a := a.(k8stesting.DeleteAction)
		cm := s.objects[a.GetName()]
		if cm == nil {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		if p := a.GetDeleteOptions().Preconditions; p != nil {
			if p.UID != nil && *p.UID != cm.UID || p.ResourceVersion != nil && *p.ResourceVersion != cm.ResourceVersion {
				return true, nil, apierrors.NewConflict(gr, a.GetName(), fmt.Errorf("precondition failed"))
			}
		}
		delete(s.objects, a.GetName())
		s.advance(1)
		return true, nil, nil
	case "get":
		if cm := s.objects[a.(k8stesting.GetAction).GetName()]; cm != nil {
			return true, cm.DeepCopy(), nil
		}
		return true, nil, apierrors.NewNotFound(gr, a.(k8stesting.GetAction).GetName())
	}
	return false, nil, nil
}

// applyPatch applies a JSON patch (what the exporter sends) to cm.
func applyPatch(cm *corev1.ConfigMap, pt types.PatchType, patch []byte) (*corev1.ConfigMap, error) {
	if pt != types.JSONPatchType {
		return nil, fmt.Errorf("fakecache: patch type %s not supported", pt)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(cm)
	if err != nil {
		return nil, err
	}
	if doc, err = p.Apply(doc); err != nil {
		return nil, err
	}
	out := &corev1.ConfigMap{}
	return out, json.Unmarshal(doc, out)
}

// Put stores cm as somebody else writes it (a new RV, no watch events).
func (s *Server) Put(cm *corev1.ConfigMap) {
	s.Lock()
	defer s.Unlock()
	cm = cm.DeepCopy()
	s.advance(1)
	if old := s.objects[cm.Name]; old != nil && cm.UID == "" {
		cm.UID = old.UID
	}
	cm.ResourceVersion = strconv.FormatUint(s.RV, 10)
	s.objects[cm.Name] = cm
}

// Get is the stored ConfigMap, or nil.
func (s *Server) Get(name string) *corev1.ConfigMap {
	s.Lock()
	defer s.Unlock()
	return s.objects[name].DeepCopy()
}

func (s *Server) watch(a k8stesting.Action) (bool, watch.Interface, error) {
	opts := a.(k8stesting.WatchActionImpl).ListOptions
	s.Lock()
	defer s.Unlock()
	w := &Watch{RaceFreeFakeWatcher: watch.NewRaceFreeFake(), Opts: opts, Opened: time.Now()}
	long := opts.TimeoutSeconds != nil
	if !long && s.ProbeErr != nil {
		if err := s.ProbeErr(opts.ResourceVersion); err != nil {
			return true, nil, err
		}
	}
	rv, err := strconv.ParseUint(opts.ResourceVersion, 10, 64)
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	if rv < s.Oldest {
		// As the cacher answers: 200, then one ERROR event.
		w.Error(&apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, s.Oldest)).ErrStatus)
		return true, w, nil
	}
	if long {
		s.Watches[opts.AllowWatchBookmarks] = append(s.Watches[opts.AllowWatchBookmarks], w)
		if s.OnWatch != nil {
			s.OnWatch(w)
		}
	}
	return true, w, nil
}

type fieldsOf string

func (f fieldsOf) Has(field string) bool { return field == "metadata.name" }
func (f fieldsOf) Get(field string) string {
	if field == "metadata.name" {
		return string(f)
	}
	return ""
}

// Bookmark is a BOOKMARK's object at the newest RV.
func (s *Server) Bookmark() *corev1.ConfigMap {
	s.Lock()
	defer s.Unlock()
	return s.BookmarkAt(s.RV)
}

// BookmarkAt is a BOOKMARK's object at rv.
func (s *Server) BookmarkAt(rv uint64) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
}

// Last is the newest long-lived watch with or without bookmarks.
func (s *Server) Last(bookmarks bool) *Watch {
	s.Lock()
	defer s.Unlock()
	l := s.Watches[bookmarks]
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}
