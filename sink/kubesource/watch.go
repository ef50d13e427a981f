package kubesource

import (
	"context"
	"strings"

	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/sink/ownerstate"
	"github.com/mcpbridge/mcpbridge/store"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// origin is what the faults of objects name in place of a file.
const origin = "kubernetes"

// objectKey names an object the source follows: which informer (an index into watch.kinds,
// or servicesIndex), and its namespace and name.
type objectKey struct {
	w               int
	namespace, name string
}

// servicesIndex is the objectKey.w of a Service (and of the EndpointSlices that name it).
const servicesIndex = -1

// watch holds the informers of one Run, and what the source computed from them.
type watch struct {
	s          *Source
	kinds      []watchedKind
	namespaces cache.SharedIndexInformer // nil without a selector
	services   *serviceWatch             // nil unless Options.Services
	selected   map[string]bool           // namespaces matching the selector, as last seen
	// rediscover starts informers of the Istio kinds the cluster serves now and did not at
	// start (their CRDs installed since), and says whether to try again later; set with crds,
	// the CRDs' informer, when some kind is not served; called on Run's goroutine.
	rediscover func() bool
	crds       cache.SharedIndexInformer
}

// watchedKind is the informer of one Istio kind.
type watchedKind struct {
	served
	informer cache.SharedIndexInformer
}

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// newWatch builds the informers (not started) and registers the source's handlers.
func (s *Source) newWatch(f *informers, resources []served) *watch {
	w := &watch{s: s, selected: map[string]bool{}}
	for _, r := range resources {
		w.addKind(f, r)
	}
	if s.selector != nil {
		w.namespaces = f.informer(namespacesGVR, "namespaces", nil)
		_, _ = w.namespaces.AddEventHandler(handlers(func(_, name string) { s.markNamespace(name) }))
	}
	if s.opts.Services {
		w.services = s.newServiceWatch(f)
	}
	return w
}

// addKind builds the informer of one served Istio kind (not started).
func (w *watch) addKind(f *informers, r served) {
	i, s := len(w.kinds), w.s
	inf := f.informer(r.gvr, r.resourceName(), nil)
	_, _ = inf.AddEventHandler(handlers(func(ns, name string) { s.mark(objectKey{i, ns, name}) }))
	w.kinds = append(w.kinds, watchedKind{served: r, informer: inf})
}

// onErrors counts the 410 Gone answers an informer's reflector reports (it then lists again)
// and logs its other errors.
func (s *Source) onErrors(inf cache.SharedIndexInformer, resource string) {
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.watchError(resource, err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
}

// handlers calls changed with the namespace and name of every object added, updated or
// deleted (a deletion seen only by a relist included).
func handlers(changed func(ns, name string)) cache.ResourceEventHandlerFuncs {
	key := func(obj any) {
		k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		ns, name, err := cache.SplitMetaNamespaceKey(k)
		if err != nil {
			return
		}
		changed(ns, name)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    key,
		UpdateFunc: func(_, obj any) { key(obj) },
		DeleteFunc: key,
	}
}

// synced are the informers' HasSynced, for the first state.
func (w *watch) synced() []cache.InformerSynced {
	var out []cache.InformerSynced
	for _, k := range w.kinds {
		out = append(out, k.informer.HasSynced)
	}
	if w.namespaces != nil {
		out = append(out, w.namespaces.HasSynced)
	}
	if w.services != nil {
		out = append(out, w.services.synced()...)
	}
	return out
}

// markCached marks every object and namespace the caches hold, for the first state.
func (w *watch) markCached() {
	for i, k := range w.kinds {
		for _, key := range k.informer.GetIndexer().ListKeys() {
			if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
				w.s.mark(objectKey{i, ns, name})
			}
		}
	}
	if w.namespaces != nil {
		for _, ns := range w.namespaces.GetIndexer().ListKeys() {
			w.s.markNamespace(ns)
		}
	}
	if w.services != nil {
		for _, key := range w.services.services.GetIndexer().ListKeys() {
			if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
				w.s.mark(objectKey{servicesIndex, ns, name})
			}
		}
	}
}

// isSelected says whether the objects of a namespace are read.
func (w *watch) isSelected(ns string) bool {
	s := w.s
	if len(s.listed) == 0 && s.selector == nil {
		return true
	}
	return s.listed[ns] || w.selected[ns]
}

// namespaceChanged re-evaluates a namespace against the selector and returns the objects of
// the namespace when its selection changed: they are to be added or removed.
func (w *watch) namespaceChanged(ns string) []objectKey {
	if w.namespaces == nil {
		return nil
	}
	now := false
	if obj, exists, _ := w.namespaces.GetIndexer().GetByKey(ns); exists {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			now = w.s.selector.Matches(labels.Set(u.GetLabels()))
		}
	}
	if now == w.selected[ns] {
		return nil
	}
	if now {
		w.selected[ns] = true
	} else {
		delete(w.selected, ns)
	}
	var keys []objectKey
	for i, k := range w.kinds {
		objs, _ := k.informer.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok {
				keys = append(keys, objectKey{i, ns, u.GetName()})
			}
		}
	}
	if w.services != nil {
		keys = append(keys, w.services.inNamespace(ns)...)
	}
	return keys
}

// refresh makes the state's resource of one name what its object now says.
func (w *watch) refresh(k objectKey, state *ownerstate.State) {
	if k.w == servicesIndex {
		w.services.refresh(k, w.isSelected(k.namespace), w.istioServiceEntryHolds, state)
		return
	}
	wk := w.kinds[k.w]
	name := k.namespace + "/" + k.name
	if w.services != nil && wk.kind == w.services.kind {
		// After this object is refreshed, the Service whose ServiceEntry would have its name.
		if svc, ok := strings.CutSuffix(k.name, ".svc"); ok {
			defer w.refresh(objectKey{servicesIndex, k.namespace, svc}, state)
		}
	}
	obj, exists, _ := wk.informer.GetIndexer().GetByKey(name)
	u, ok := obj.(*unstructured.Unstructured)
	if !exists || !ok || !w.isSelected(k.namespace) {
		state.Delete(wk.kind.Collection, name)
		w.s.setObjectFaults(k, nil)
		return
	}
	enc, errs := encodeObject(u, wk.served)
	w.s.setObjectFaults(k, errs)
	if errs == nil {
		state.Put(wk.kind.Collection, enc)
	}
	// An invalid object keeps its last valid version served: an edit that breaks it must not
	// take the config away, as a file's faulty document keeps its last good resources.
}

// istioServiceEntryHolds says whether the store holds an Istio ServiceEntry of the cluster
// under a name ("namespace/name").
func (w *watch) istioServiceEntryHolds(name string) bool {
	for _, k := range w.kinds {
		if k.kind == w.services.kind {
			obj, exists, _ := k.informer.GetIndexer().GetByKey(name)
			if !exists {
				return false
			}
			ns, _, _ := strings.Cut(name, "/")
			_, isObj := obj.(*unstructured.Unstructured)
			return isObj && w.isSelected(ns)
		}
	}
	return false
}

// encodeObject decodes and validates an object as a file's document, and encodes it for the
// store.
func encodeObject(u *unstructured.Unstructured, r served) (store.Encoded, []error) {
	if u.GetAPIVersion() == "" || u.GetKind() == "" { // lists may leave them to the list
		u = u.DeepCopy()
		u.SetAPIVersion(r.gvr.GroupVersion().String())
		u.SetKind(r.kind.Kind)
	}
	js, err := u.MarshalJSON()
	if err != nil {
		return store.Encoded{}, []error{&filesource.DecodeError{File: origin, Kind: r.kind.Kind, Name: u.GetNamespace() + "/" + u.GetName(), Err: err}}
	}
	obj, errs := filesource.DecodeJSON(js, origin)
	if errs != nil {
		return store.Encoded{}, errs
	}
	// Versioned by content, not by resourceVersion: a write of the status alone (istiod's
	// status controller writes it) must not push the same config to every client again.
	obj.Resource.Metadata.Version = ""
	enc, err := store.Encode(obj.Resource)
	if err != nil {
		return store.Encoded{}, []error{&filesource.DecodeError{File: origin, Kind: r.kind.Kind, Name: obj.Name(), Err: err}}
	}
	return enc.Checked(), nil // as the file source's: DecodeJSON's bodies are well formed
}
