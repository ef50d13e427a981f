package kubesource

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// crdsGVR are the CustomResourceDefinitions. While some Istio kind is not served, the source
// watches them, so that installing its CRD later is enough for the source to read it: no
// restart is needed.
var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// watchCRDs starts an informer of the CRDs, each change of which makes Run discover the served
// kinds again, when some kind is not served; the first state does not wait for it.
func (s *Source) watchCRDs(ctx context.Context, f *informers, w *watch, cfg *rest.Config) {
	if len(s.Stats().NotServed) == 0 {
		return
	}
	inf := f.informer(crdsGVR, crdsGVR.Resource+"."+crdsGVR.Group, nil)
	_, _ = inf.AddEventHandler(handlers(func(_, _ string) { s.markCRDs() }))
	w.rediscover = func() { w.addServed(ctx, cfg, f) }
}

// markCRDs records that a CRD changed and wakes Run's loop.
func (s *Source) markCRDs() {
	s.mu.Lock()
	s.crdsChanged = true
	s.mu.Unlock()
	s.signal()
}

// takeCRDs says whether a CRD changed since the last call.
func (s *Source) takeCRDs() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.crdsChanged
	s.crdsChanged = false
	return changed
}

// addServed discovers the served kinds again and starts an informer for each it does not read
// yet. It runs on Run's goroutine, the only one that touches w.kinds.
func (w *watch) addServed(ctx context.Context, cfg *rest.Config, f *informers) {
	resources, notServed, err := discover(cfg)
	if err != nil {
		w.s.log.Info("discovering the served Istio kinds again failed; tried again at the next CRD change", "err", err.Error())
		return
	}
	for _, r := range resources {
		if slices.ContainsFunc(w.kinds, func(k watchedKind) bool { return k.kind == r.kind }) {
			continue
		}
		w.addKind(f, r)
		w.s.log.Info("reading an Istio kind whose CRD the cluster serves now", "resource", r.resourceName())
	}
	f.start(ctx)
	w.s.mu.Lock()
	w.s.stats.NotServed = notServed
	w.s.mu.Unlock()
}
