package apiservers

import (
	"context"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Discover keeps fleet measuring the endpoints of the default/kubernetes
// Service (one per apiserver instance) until ctx ends.
func Discover(ctx context.Context, client kubernetes.Interface, fleet *Fleet, log logr.Logger) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes"
		}))
	inf := factory.Discovery().V1().EndpointSlices()
	sync := func() {
		sl, err := inf.Lister().List(labels.Everything())
		if err != nil {
			log.Error(err, "listing EndpointSlices of default/kubernetes")
			return
		}
		eps := FromSlices(sl)
		if len(eps) == 0 {
			log.Info("no ready endpoint in the EndpointSlices of default/kubernetes; keeping the apiservers measured so far")
			return
		}
		fleet.Sync(ctx, eps)
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { sync() },
		UpdateFunc: func(any, any) { sync() },
		DeleteFunc: func(any) { sync() },
	}); err != nil {
		log.Error(err, "watching EndpointSlices")
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	<-ctx.Done()
}
