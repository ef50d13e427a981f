package kubesource

import (
	"context"
	"slices"
	"strings"

	"github.com/mcpbridge/mcpbridge/kinds"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// crdsGVR are the CustomResourceDefinitions. While some Istio kind is not served, the source
// watches them, so that installing its CRD later is enough for the source to read it: no
// restart is needed.
var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// watchCRDs builds an informer of the CRDs, each change of an Istio one making Run discover the
// served kinds again, when some kind is not served; the first state does not wait for it.
func (s *Source) watchCRDs(ctx context.Context, f *informers, w *watch, cfg *rest.Config) {
	if len(s.Stats().NotServed) == 0 {
		return
	}
	inf := f.informer(crdsGVR, crdsGVR.Resource+"."+crdsGVR.Group, nil)
	_, _ = inf.AddEventHandler(handlers(func(_, name string) {
		if istioCRD(name) { // another project's CRD changes nothing here
			s.markCRDs()
		}
	}))
	w.crds = inf
	w.rediscover = func() bool { return w.addServed(ctx, cfg, f) }
}

// istioCRD says whether a CRD's name (PLURAL.GROUP) is of an Istio group.
func istioCRD(name string) bool { return strings.HasSuffix(name, ".istio.io") }

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
// yet. It runs on Run's goroutine, the only one that touches w.kinds. It returns true when it
// is to be tried again: discovery failed, or the CRD of a kind not read yet exists but is not
// served yet (the API server adds a CRD to discovery a moment after it is established, and no
// CRD event may follow).
func (w *watch) addServed(ctx context.Context, cfg *rest.Config, f *informers) (again bool) {
	resources, notServed, err := discover(cfg)
	if err != nil {
		w.s.log.Info("discovering the served Istio kinds again failed; trying again", "err", err.Error())
		return true
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
	return w.crdNotServedYet()
}

// crdNotServedYet says whether a CRD of a known Istio kind exists that the source does not read.
func (w *watch) crdNotServedYet() bool {
	reading := map[string]bool{}
	for _, k := range w.kinds {
		reading[k.resourceName()] = true
	}
	for _, k := range kinds.Kinds() {
		name := plural(k) + "." + k.Group
		if _, exists, _ := w.crds.GetIndexer().GetByKey(name); exists && !reading[name] {
			return true
		}
	}
	return false
}
