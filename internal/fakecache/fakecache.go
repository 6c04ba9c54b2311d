// Package fakecache is client-go's fake clientset dressed as an apiserver
// with a watch cache, for the hermetic tests of the measurement's logic: it
// numbers writes with resourceVersions, refuses watches from RVs older than
// its oldest with 410 "too old resource version: R (O)", and hands each
// long-lived watch to the test to drive. It knows nothing of the real
// cache's sizing: the tests of the numbers run against the real apiserver.
package fakecache

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	switch a := a.(type) {
	case k8stesting.ListAction:
		l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(s.RV, 10)}}
		for name, cm := range s.objects {
			if f := a.GetListRestrictions().Fields; f.Empty() || f.Matches(fieldsOf(name)) {
				l.Items = append(l.Items, *cm.DeepCopy())
			}
		}
		return true, l, nil
	case k8stesting.CreateAction:
		cm := a.GetObject().(*corev1.ConfigMap).DeepCopy()
		if s.objects[cm.Name] != nil {
			return true, nil, apierrors.NewAlreadyExists(gr, cm.Name)
		}
		s.advance(1)
		cm.ResourceVersion = strconv.FormatUint(s.RV, 10)
		s.objects[cm.Name] = cm
		return true, cm.DeepCopy(), nil
	case k8stesting.PatchAction:
		if s.PatchErr != nil {
			if err := s.PatchErr(a.GetName()); err != nil {
				return true, nil, err
			}
		}
		cm := s.objects[a.GetName()]
		if cm == nil {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		s.advance(1)
		cm.ResourceVersion = strconv.FormatUint(s.RV, 10)
		return true, cm.DeepCopy(), nil
	case k8stesting.DeleteAction:
		if s.objects[a.GetName()] == nil {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		delete(s.objects, a.GetName())
		s.advance(1)
		return true, nil, nil
	case k8stesting.GetAction: // last: patches and deletes have names too
		if cm := s.objects[a.GetName()]; cm != nil {
			return true, cm.DeepCopy(), nil
		}
		return true, nil, apierrors.NewNotFound(gr, a.GetName())
	}
	return false, nil, nil
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
