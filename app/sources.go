package app

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/sink/kubesource"
	"github.com/mcpbridge/mcpbridge/sink/zksource"
	"k8s.io/klog/v2"
)

// followed is a source that follows an outside system (a Kubernetes API server, a ZooKeeper
// registry): it reports its faults and figures for the metrics, /debug/producers and the
// status page.
type followed interface {
	report() metrics.SourceReport
}

// registrySources builds the sources of sources.kubernetes and sources.zookeeper, writing to
// the store's writer; each call builds new ones (an elected ingester builds its own per term).
func (b *Bridge) registrySources() ([]runner, []followed, error) {
	cfg := b.cfg
	var runners []runner
	var out []followed
	if k := cfg.Sources.Kubernetes; k != nil {
		routeKlog(b.log)
		src, err := kubesource.New(kubesource.Options{
			Kubeconfig: k.Kubeconfig, Namespaces: k.Namespaces, NamespaceSelector: k.NamespaceSelector,
			Services: k.Services, DomainSuffix: cfg.Translate.DomainSuffix, Store: b.writer, Logger: b.log,
		})
		if err != nil {
			return nil, nil, ConfigErrorf("sources.kubernetes: %v", err)
		}
		runners = append(runners, runner{name: "sources.kubernetes", run: src.Run, ready: src.Ready()})
		out = append(out, kubeFollowed{src})
	}
	for i, z := range cfg.Sources.Zookeeper {
		src, err := zksource.New(zksource.Options{
			Name: z.Name, Servers: z.Servers, SessionTimeout: z.SessionTimeout,
			DubboRoot: z.DubboRoot, SpringRoot: z.SpringRoot, Store: b.writer, Logger: b.log,
		})
		if err != nil {
			return nil, nil, ConfigErrorf("sources.zookeeper[%d]: %v", i, err)
		}
		name := "sources.zookeeper[" + z.Name + "]"
		runners = append(runners, runner{name: name, run: src.Run, ready: src.Ready()})
		out = append(out, zkFollowed{src: src, key: name})
	}
	return runners, out, nil
}

// klogOnce sets klog's logger once per process: klog's logger is global and setting it is not
// safe while client-go logs, which another bridge of the process (tests run several) may do.
var klogOnce sync.Once

// routeKlog sends client-go's log lines (klog, to stderr unless told otherwise) into the
// bridge's log, once per process.
func routeKlog(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(log.With("component", "client-go")) })
}

// sourceReports are the reports of the followed sources running now: this bridge's, or with
// the etcd backend those of this replica's term as the elected ingester (none otherwise).
func (b *Bridge) sourceReports() []metrics.SourceReport {
	list := b.followed.Load()
	if list == nil {
		return nil
	}
	out := make([]metrics.SourceReport, 0, len(*list))
	for _, f := range *list {
		out = append(out, f.report())
	}
	return out
}

func faultStrings(errs []error) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

func isReady(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

type kubeFollowed struct{ src *kubesource.Source }

func (k kubeFollowed) report() metrics.SourceReport {
	st := k.src.Stats()
	state := ""
	if len(st.NotServed) > 0 {
		state = fmt.Sprintf("%d Istio kinds not served by the cluster", len(st.NotServed))
	}
	return metrics.SourceReport{
		Source: "sources.kubernetes", Owner: kubesource.DefaultOwner, Ready: isReady(k.src.Ready()), State: state,
		Objects: st.Objects, WatchRestarts: st.WatchRestarts, Relists: st.Relists, LastSync: st.LastSync,
		Faults: faultStrings(k.src.Faults()),
	}
}

type zkFollowed struct {
	src *zksource.Source
	key string
}

func (z zkFollowed) report() metrics.SourceReport {
	st := z.src.Stats()
	state := st.Session
	if st.Connected {
		state = "connected"
	}
	objects := map[string]int{}
	if st.Services > 0 {
		objects[zksource.Collection()] = st.Services
	}
	restarts := map[string]int{}
	if st.Connects > 1 {
		restarts["session"] = int(st.Connects - 1)
	}
	relists := map[string]int{}
	if st.Expiries > 0 { // a new session reads the whole registry again
		relists["registry"] = int(st.Expiries)
	}
	return metrics.SourceReport{
		Source: z.key, Owner: z.src.Owner(), Ready: isReady(z.src.Ready()), State: state,
		Objects: objects, WatchRestarts: restarts, Relists: relists, LastSync: st.LastSync,
		Faults: faultStrings(z.src.Faults()),
	}
}
