package kubesource

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// informers builds the source's informers over one dynamic client and runs them. Each lists
// and watches (plain LIST then WATCH), and counts its lists and watches: the first of each
// is the start, every other one is a watch re-established or a relist, which Stats reports.
// (client-go's streaming lists, WatchList, are left off: a list is then a list, counted as
// one, and served by any API server.)
type informers struct {
	s       *Source
	client  dynamic.Interface
	all     []cache.SharedIndexInformer
	started int // all[:started] run
	wg      sync.WaitGroup
}

// informer returns a new informer of every object of a resource, indexed by namespace (and
// by the extra indexers), named resource in Stats.
func (f *informers) informer(gvr schema.GroupVersionResource, resource string, extra cache.Indexers) cache.SharedIndexInformer {
	ri := f.client.Resource(gvr)
	s := f.s
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := ri.List(ctx, o)
			if err != nil {
				s.resourceFailed(resource, "list", err)
				return nil, err
			}
			s.resourceOK(resource)
			if o.Continue == "" { // a list's first page: one list, however many pages
				s.listStarted(resource)
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (kwatch.Interface, error) {
			s.watchStarted(resource)
			if s.watchTimeout > 0 {
				secs := int64(s.watchTimeout / time.Second)
				o.TimeoutSeconds = &secs
			}
			w, err := ri.Watch(ctx, o)
			if err != nil {
				s.watchFailed(resource, err)
				s.resourceFailed(resource, "watch", err)
				return nil, err
			}
			s.resourceOK(resource)
			// A watch from a compacted version is answered with an ERROR event, not an error.
			return newErrorWatch(w, func(err error) { s.watchFailed(resource, err) }), nil
		},
	}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for k, v := range extra {
		indexers[k] = v
	}
	inf := cache.NewSharedIndexInformerWithOptions(listThenWatch{lw}, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
		Indexers: indexers, ObjectDescription: gvr.String(),
	})
	s.onErrors(inf, resource)
	f.all = append(f.all, inf)
	return inf
}

// start runs every informer not started yet until ctx ends.
func (f *informers) start(ctx context.Context) {
	for _, inf := range f.all[f.started:] {
		f.wg.Go(func() { inf.RunWithContext(ctx) })
	}
	f.started = len(f.all)
}

// wait returns once every informer has stopped (after ctx ended).
func (f *informers) wait() { f.wg.Wait() }

// listThenWatch is a ListWatch that tells client-go's reflector not to stream its lists
// (client-go's util/watchlist looks for IsWatchListSemanticsUnSupported).
type listThenWatch struct{ *cache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// errorWatch passes a watch's events on, reporting its ERROR events. (apimachinery's
// watch.Filter would do, but its goroutine outlives a Stop while blocked on a send.)
type errorWatch struct {
	inner    kwatch.Interface
	out      chan kwatch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func newErrorWatch(inner kwatch.Interface, report func(error)) *errorWatch {
	w := &errorWatch{inner: inner, out: make(chan kwatch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		for ev := range inner.ResultChan() {
			if ev.Type == kwatch.Error {
				report(apierrors.FromObject(ev.Object))
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *errorWatch) ResultChan() <-chan kwatch.Event { return w.out }

func (w *errorWatch) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.inner.Stop()
}
