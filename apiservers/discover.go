package apiservers

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchcache/watchcache-exporter/internal/kube"
)

// Discover keeps fleet measuring the endpoints of the default/kubernetes
// Service (one per apiserver instance) until ctx ends: it syncs the fleet at
// each change of the EndpointSlices, and expires the endpoints absent for
// the grace period between changes.
func Discover(ctx context.Context, client kube.EndpointSlicesGetter, fleet *Fleet, log logr.Logger) {
	selector := discoveryv1.LabelServiceName + "=kubernetes"
	slices := client.EndpointSlices(metav1.NamespaceDefault)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return slices.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return slices.Watch(ctx, o)
		},
	}
	var store cache.Store
	resync := func() {
		var sl []*discoveryv1.EndpointSlice
		for _, o := range store.List() {
			sl = append(sl, o.(*discoveryv1.EndpointSlice))
		}
		eps := FromSlices(sl)
		if len(eps) == 0 {
			log.Info("no ready endpoint in the EndpointSlices of default/kubernetes; keeping the apiservers measured so far")
			return
		}
		fleet.Sync(ctx, eps)
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &discoveryv1.EndpointSlice{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { resync() },
			UpdateFunc: func(any, any) { resync() },
			DeleteFunc: func(any) { resync() },
		},
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		wait.UntilWithContext(ctx, func(context.Context) { fleet.Expire() }, min(max(fleet.grace/10, time.Second), 10*time.Second))
	})
	ctrl.RunWithContext(ctx)
	wg.Wait()
}
