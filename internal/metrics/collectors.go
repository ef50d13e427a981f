package metrics

import (
	"fmt"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpbridge/mcpbridge/store"
)

// What is read from the store and from the fault reporters is read at scrape time, by
// collectors: nothing on the write path pays for it.

var (
	resourcesDesc = prometheus.NewDesc("mcpbridge_collection_resources",
		"Resources served per collection.", []string{"collection"}, nil)
	revisionDesc = prometheus.NewDesc("mcpbridge_collection_revision",
		"Store revision of each collection's last change: the version clients are sent.", []string{"collection"}, nil)
	conflictsDesc = prometheus.NewDesc("mcpbridge_owner_conflicts_total",
		"Names found held by more than one producer (a connected owner is served before a disconnected one, then the first by ID), counted per write that saw them.", nil, nil)
	shadowedDesc = prometheus.NewDesc("mcpbridge_shadowed_resources",
		"Names per collection held by more than one producer, whose other copies are shadowed (see /debug/collections/{collection}).", []string{"collection"}, nil)
	writesDesc = prometheus.NewDesc("mcpbridge_store_writes_total",
		"Store writes that changed what is served.", nil, nil)
	translationFaultsDesc = prometheus.NewDesc("mcpbridge_translation_faults",
		"Faults the translation currently reports, by kind.", []string{"kind"}, nil)
	fileFaultsDesc = prometheus.NewDesc("mcpbridge_file_faults",
		"Faults the file source found at its last reload (faulty documents, unreadable files, names defined twice).", nil, nil)
)

type storeCollector struct{ st *store.Store }

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- resourcesDesc
	ch <- revisionDesc
	ch <- shadowedDesc
	ch <- conflictsDesc
	ch <- writesDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, info := range c.st.View().Collections() {
		ch <- prometheus.MustNewConstMetric(resourcesDesc, prometheus.GaugeValue, float64(info.Count), info.Name)
		ch <- prometheus.MustNewConstMetric(revisionDesc, prometheus.GaugeValue, float64(info.Revision), info.Name)
		ch <- prometheus.MustNewConstMetric(shadowedDesc, prometheus.GaugeValue, float64(info.Shadowed), info.Name)
	}
	st := c.st.Stats()
	ch <- prometheus.MustNewConstMetric(conflictsDesc, prometheus.CounterValue, float64(st.Conflicts))
	ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(st.Writes))
}

// WatchStore reports the store's collections, owner conflicts and writes.
func (m *Metrics) WatchStore(st *store.Store) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(storeCollector{st})
}

// Fault is one translation fault, as the metric and the status page show it.
type Fault struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Message string `json:"message"`
}

// FaultsFunc returns the current translation faults.
type FaultsFunc func() []Fault

type faultsCollector struct{ faults FaultsFunc }

func (c faultsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- translationFaultsDesc }

func (c faultsCollector) Collect(ch chan<- prometheus.Metric) {
	byKind := map[string]int{}
	for _, f := range c.faults() {
		byKind[f.Kind]++
	}
	for kind, n := range byKind {
		ch <- prometheus.MustNewConstMetric(translationFaultsDesc, prometheus.GaugeValue, float64(n), kind)
	}
}

// WatchScopes reports the namespaces' views the translation builds (held) and the proxies
// refused one of their own over its bound (refused). Nil funcs report nothing.
func (m *Metrics) WatchScopes(held func() int, refused func() uint64) error {
	if m == nil || held == nil || refused == nil {
		return nil
	}
	if err := m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mcpbridge_translation_scopes",
		Help: "Namespaces whose proxies' views the translation builds (a sidecar of each is connected, or was within the grace period).",
	}, func() float64 { return float64(held()) })); err != nil {
		return err
	}
	return m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mcpbridge_translation_scopes_refused_total",
		Help: "Proxies refused a view of their namespace because the translation builds its maximum of namespaces' views already; they are served the mesh-wide view.",
	}, func() float64 { return float64(refused()) }))
}

// HeldViewsFunc reports, by view, what connected clients hold of the outputs the translation
// builds only for them (translate/envoy Controller.Held).
type HeldViewsFunc func() map[string]float64

// WatchHeldViews reports the views of HeldViewsFunc, one gauge each, labelled view. A nil
// func reports nothing.
func (m *Metrics) WatchHeldViews(views []string, held HeldViewsFunc) error {
	if m == nil || held == nil {
		return nil
	}
	for _, v := range views {
		if err := m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "mcpbridge_translation_held_views",
			Help:        "What connected clients hold of the outputs the translation builds only while asked for: proxyless_hosts and port_routes count the hosts and ports held one by one; proxyless_all and port_routes_all are 1 while every host's or port's is held.",
			ConstLabels: prometheus.Labels{"view": v},
		}, func() float64 { return held()[v] })); err != nil {
			return err
		}
	}
	return nil
}

// WatchTranslationFaults reports the faults of the translation. A nil func reports none.
func (m *Metrics) WatchTranslationFaults(faults FaultsFunc) error {
	if m == nil || faults == nil {
		return nil
	}
	return m.reg.Register(faultsCollector{faults})
}

type fileFaultsCollector struct{ faults func() []error }

func (c fileFaultsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- fileFaultsDesc }

func (c fileFaultsCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(fileFaultsDesc, prometheus.GaugeValue, float64(len(c.faults())))
}

// WatchFileFaults reports the file source's faults.
func (m *Metrics) WatchFileFaults(faults func() []error) error {
	if m == nil || faults == nil {
		return nil
	}
	return m.reg.Register(fileFaultsCollector{faults})
}

// FaultsFrom adapts anything with a Faults() []T method, T a struct with string fields Kind,
// Name and Message (as the translation controller reports them), to a FaultsFunc, so that
// wiring a controller is one line: metrics.FaultsFrom(controller). A field T lacks is left
// empty; a T that is not a struct becomes the Message.
func FaultsFrom[T any](src interface{ Faults() []T }) FaultsFunc {
	return func() []Fault {
		in := src.Faults()
		out := make([]Fault, len(in))
		for i, f := range in {
			out[i] = toFault(f)
		}
		return out
	}
}

func toFault(f any) Fault {
	v := reflect.Indirect(reflect.ValueOf(f))
	if v.Kind() != reflect.Struct {
		return Fault{Message: fmt.Sprint(f)}
	}
	field := func(name string) string {
		fv := v.FieldByName(name)
		if !fv.IsValid() || !fv.CanInterface() {
			return ""
		}
		if fv.Kind() == reflect.String {
			return fv.String()
		}
		return fmt.Sprint(fv.Interface())
	}
	return Fault{Kind: field("Kind"), Name: field("Name"), Message: field("Message")}
}
