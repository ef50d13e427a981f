package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SourceReport is what a source that follows an outside system (a Kubernetes API server, a
// ZooKeeper registry) reports, for the metrics, /debug/producers and the status page.
type SourceReport struct {
	// Source is the configuration key of the source: "sources.kubernetes",
	// "sources.zookeeper[registry]".
	Source string `json:"source"`
	// Owner is the producer ID its resources are stored under.
	Owner string `json:"owner"`
	// Ready says whether its first full state was offered to the store.
	Ready bool `json:"ready"`
	// State says how it stands with the outside system ("connected", "session expired...").
	State string `json:"state,omitempty"`
	// Objects counts the resources it serves, by collection.
	Objects map[string]int `json:"objects"`
	// WatchRestarts counts the watches started again after the first, by what is watched.
	WatchRestarts map[string]int `json:"watch_restarts,omitempty"`
	// Relists counts the full reads after the first, by what is read.
	Relists map[string]int `json:"relists,omitempty"`
	// LastSync is when the store last took its changes; zero before the first.
	LastSync time.Time `json:"last_sync"`
	// Faults are its current faults: invalid objects, the outside system unreachable.
	Faults []string `json:"faults"`
}

var (
	sourceObjectsDesc = prometheus.NewDesc("mcpbridge_source_objects",
		"Resources a source that follows an outside system (sources.kubernetes, sources.zookeeper) serves, by collection.", []string{"source", "collection"}, nil)
	sourceFaultsDesc = prometheus.NewDesc("mcpbridge_source_faults",
		"Current faults of a source that follows an outside system: invalid objects (each served as its last valid version, or not at all), the system unreachable.", []string{"source"}, nil)
	sourceRestartsDesc = prometheus.NewDesc("mcpbridge_source_watch_restarts_total",
		"Watches a source started again after the first (a broken connection, a server's timeout, a new ZooKeeper session), by what is watched.", []string{"source", "resource"}, nil)
	sourceRelistsDesc = prometheus.NewDesc("mcpbridge_source_relists_total",
		"Full reads a source made after the first (a watch that could not resume, 410 Gone included), by what is read.", []string{"source", "resource"}, nil)
	sourceLastSyncDesc = prometheus.NewDesc("mcpbridge_source_last_sync_timestamp_seconds",
		"When the store last took a source's changes (Unix time); absent before its first.", []string{"source"}, nil)
)

type sourcesCollector struct{ reports func() []SourceReport }

func (c sourcesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sourceObjectsDesc, sourceFaultsDesc, sourceRestartsDesc, sourceRelistsDesc, sourceLastSyncDesc} {
		ch <- d
	}
}

func (c sourcesCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.reports() {
		for coll, n := range r.Objects {
			ch <- prometheus.MustNewConstMetric(sourceObjectsDesc, prometheus.GaugeValue, float64(n), r.Source, coll)
		}
		ch <- prometheus.MustNewConstMetric(sourceFaultsDesc, prometheus.GaugeValue, float64(len(r.Faults)), r.Source)
		for res, n := range r.WatchRestarts {
			ch <- prometheus.MustNewConstMetric(sourceRestartsDesc, prometheus.CounterValue, float64(n), r.Source, res)
		}
		for res, n := range r.Relists {
			ch <- prometheus.MustNewConstMetric(sourceRelistsDesc, prometheus.CounterValue, float64(n), r.Source, res)
		}
		if !r.LastSync.IsZero() {
			ch <- prometheus.MustNewConstMetric(sourceLastSyncDesc, prometheus.GaugeValue, float64(r.LastSync.UnixNano())/1e9, r.Source)
		}
	}
}

// WatchSources reports the sources that follow outside systems. A nil func reports none.
func (m *Metrics) WatchSources(reports func() []SourceReport) error {
	if m == nil || reports == nil {
		return nil
	}
	return m.reg.Register(sourcesCollector{reports})
}
