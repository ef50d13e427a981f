package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/mcpbridge/mcpbridge/internal/metrics"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink"
	"github.com/mcpbridge/mcpbridge/source"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
)

// CollectionOf maps any name of a kind (MCP collection or alias, xDS type URL, AMCS type URL)
// to its store collection and kind. Other names (Envoy type URLs, opaque collections) are
// store collections as they are, of no known kind.
func CollectionOf(name string) (collection, kind string) {
	for _, lookup := range []func(string) (*kinds.Kind, bool){kinds.ByCollection, kinds.ByXDSTypeURL, kinds.ByAMCSTypeURL} {
		if k, ok := lookup(name); ok {
			return k.Collection, k.Kind
		}
	}
	return name, ""
}

// debug serves the /debug endpoints.
type debug struct{ opts Options }

// CollectionSummary is one collection in /debug/collections and on the status page.
type CollectionSummary struct {
	Name string `json:"name"`
	// Kind is the Istio kind, empty for Envoy and opaque collections.
	Kind  string `json:"kind,omitempty"`
	Count int    `json:"count"`
	// Shadowed counts the names held by more than one owner (see ResourceDump.Shadowed).
	Shadowed int `json:"shadowed,omitempty"`
	// Revision is the store revision of the collection's last change; Version is the same as
	// clients see it (system_version_info, version_info).
	Revision uint64    `json:"revision"`
	Version  string    `json:"version"`
	Changed  time.Time `json:"changed"`
}

func summary(info store.CollectionInfo) CollectionSummary {
	_, kind := CollectionOf(info.Name)
	return CollectionSummary{
		Name: info.Name, Kind: kind, Count: info.Count, Shadowed: info.Shadowed, Revision: info.Revision,
		Version: strconv.FormatUint(info.Revision, 10), Changed: info.Changed,
	}
}

// CollectionsResponse is GET /debug/collections.
type CollectionsResponse struct {
	// Revision is the store's latest revision.
	Revision    uint64              `json:"revision"`
	Collections []CollectionSummary `json:"collections"`
}

func (d *debug) collectionList() CollectionsResponse {
	v := d.opts.Store.View()
	out := CollectionsResponse{Revision: v.Revision(), Collections: []CollectionSummary{}}
	for _, info := range v.Collections() {
		out.Collections = append(out.Collections, summary(info))
	}
	return out
}

func (d *debug) collections(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, d.opts.Logger, http.StatusOK, d.collectionList())
}

// ResourceDump is one stored resource: who holds it, at which version, and the resource.
type ResourceDump struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Owner    string `json:"owner"`
	Revision uint64 `json:"revision"`
	// Shadowed are the other owners holding the name, whose copies are not served.
	Shadowed []string `json:"shadowed,omitempty"`
	// Resource is the istio.mcp.v1alpha1.Resource as protojson; ResourceError says why not,
	// for a body whose type this binary does not know.
	Resource      json.RawMessage `json:"resource,omitempty"`
	ResourceError string          `json:"resource_error,omitempty"`
}

// CollectionDump is GET /debug/collections/{collection}.
type CollectionDump struct {
	CollectionSummary
	Resources []ResourceDump `json:"resources"`
}

var dumpJSON = protojson.MarshalOptions{Resolver: protoregistry.GlobalTypes}

func dump(e *store.Entry) ResourceDump {
	r := ResourceDump{Name: e.Name, Version: e.Version, Owner: e.Owner, Revision: e.Revision, Shadowed: e.Shadowed()}
	res, err := e.Decode()
	var js []byte
	if err == nil {
		js, err = dumpJSON.Marshal(res)
	}
	if err != nil {
		r.ResourceError = err.Error()
		return r
	}
	r.Resource = js
	return r
}

func (d *debug) collection(w http.ResponseWriter, r *http.Request) {
	asked := strings.TrimSuffix(r.PathValue("collection"), "/")
	name, kind := CollectionOf(asked)
	v := d.opts.Store.View()
	info := v.Collection(name)
	if info.Revision == 0 && kind == "" && !isEnvoyType(name) {
		writeError(w, d.opts.Logger, http.StatusNotFound, "no collection %q: see /debug/collections for those stored", asked)
		return
	}
	_, entries := v.Snapshot(name)
	out := CollectionDump{CollectionSummary: summary(info), Resources: make([]ResourceDump, 0, len(entries))}
	for _, e := range entries {
		out.Resources = append(out.Resources, dump(e))
	}
	writeJSON(w, d.opts.Logger, http.StatusOK, out)
}

// isEnvoyType tells the Envoy collections, which exist (empty) before the translation writes them.
func isEnvoyType(name string) bool {
	return strings.HasPrefix(name, "type.googleapis.com/envoy.")
}

// ClientsResponse is GET /debug/clients.
type ClientsResponse struct {
	Clients []source.ClientInfo `json:"clients"`
}

func (d *debug) clients(w http.ResponseWriter, _ *http.Request) {
	out := ClientsResponse{Clients: d.opts.Engine.Clients()}
	if out.Clients == nil {
		out.Clients = []source.ClientInfo{}
	}
	writeJSON(w, d.opts.Logger, http.StatusOK, out)
}

// ClientView is GET /debug/clients/{id}: the stream, and for each subscription what the bridge
// serves it now.
type ClientView struct {
	source.ClientInfo
	View []SubscriptionView `json:"view"`
}

// SubscriptionView is what one subscription is served as of now.
type SubscriptionView struct {
	Type       string `json:"type"`
	Collection string `json:"collection"`
	// CurrentVersion is the collection's version now; UpToDate, whether the client has
	// acknowledged it.
	CurrentVersion string         `json:"current_version"`
	UpToDate       bool           `json:"up_to_date"`
	Resources      []ResourceDump `json:"resources"`
	// Missing are subscribed names that do not exist.
	Missing []string `json:"missing,omitempty"`
}

func (d *debug) client(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, d.opts.Logger, http.StatusBadRequest, "client id %q is not a number: see /debug/clients for the ids", r.PathValue("id"))
		return
	}
	ci, ok := d.opts.Engine.Client(id)
	if !ok {
		writeError(w, d.opts.Logger, http.StatusNotFound, "no connected client %d: see /debug/clients", id)
		return
	}
	v := d.opts.Store.View()
	out := ClientView{ClientInfo: ci, View: make([]SubscriptionView, 0, len(ci.Subscriptions))}
	for _, sub := range ci.Subscriptions {
		out.View = append(out.View, subscriptionView(v, sub))
	}
	writeJSON(w, d.opts.Logger, http.StatusOK, out)
}

func subscriptionView(v *store.View, sub source.SubscriptionInfo) SubscriptionView {
	info := v.Collection(sub.Collection)
	sv := SubscriptionView{
		Type: sub.Type, Collection: store.DisplayName(sub.Collection), CurrentVersion: strconv.FormatUint(info.Revision, 10),
		UpToDate: sub.Acked && sub.AckedRevision == info.Revision, Resources: []ResourceDump{},
	}
	if sub.Wildcard {
		_, entries := v.Snapshot(sub.Collection)
		for _, e := range entries {
			sv.Resources = append(sv.Resources, dump(e))
		}
		return sv
	}
	for _, name := range sub.Names {
		if e := v.Get(sub.Collection, name); e != nil {
			sv.Resources = append(sv.Resources, dump(e))
		} else {
			sv.Missing = append(sv.Missing, name)
		}
	}
	return sv
}

// ProducersResponse is GET /debug/producers: who feeds the bridge.
type ProducersResponse struct {
	// Producers are those that dialled the ResourceSink service.
	Producers []sink.ProducerInfo `json:"producers"`
	// Peers are the upstreams and downstreams the bridge dials.
	Peers []metrics.PeerInfo `json:"peers"`
	// FileFaults are the file source's faults at its last reload.
	FileFaults []string `json:"file_faults"`
	// Sources are the sources that follow outside systems (Kubernetes, ZooKeeper).
	Sources []metrics.SourceReport `json:"sources"`
	// TranslationFaults are the translation's current faults.
	TranslationFaults []metrics.Fault `json:"translation_faults"`
}

func (d *debug) producerList() ProducersResponse {
	out := ProducersResponse{
		Producers: []sink.ProducerInfo{}, Peers: d.opts.Metrics.Peers(),
		FileFaults: []string{}, TranslationFaults: []metrics.Fault{}, Sources: []metrics.SourceReport{},
	}
	if d.opts.Sources != nil {
		out.Sources = append(out.Sources, d.opts.Sources()...)
	}
	if d.opts.Sink != nil {
		out.Producers = d.opts.Sink.Producers()
	}
	if out.Peers == nil {
		out.Peers = []metrics.PeerInfo{}
	}
	if d.opts.FileFaults != nil {
		for _, f := range d.opts.FileFaults() {
			out.FileFaults = append(out.FileFaults, f.Error())
		}
	}
	if d.opts.TranslationFaults != nil {
		out.TranslationFaults = append(out.TranslationFaults, d.opts.TranslationFaults()...)
	}
	return out
}

func (d *debug) producers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, d.opts.Logger, http.StatusOK, d.producerList())
}

// GatewaysResponse is GET /debug/gateways: the gateway classes built for the gateway proxies
// connected (and those in their grace period), with the Gateways each merges and the
// listeners it has, and the Gateways' faults: a server left out of a merge (a conflicting
// protocol on a port, a TLS host already served) is one, also counted in
// mcpbridge_translation_faults{kind="Gateway"}.
type GatewaysResponse struct {
	Classes []envoy.GatewayClassInfo `json:"classes"`
	Faults  []metrics.Fault          `json:"faults"`
}

func (d *debug) gateways(w http.ResponseWriter, _ *http.Request) {
	resp := GatewaysResponse{Classes: []envoy.GatewayClassInfo{}, Faults: []metrics.Fault{}}
	if d.opts.GatewayClasses != nil {
		resp.Classes = d.opts.GatewayClasses()
	}
	if d.opts.TranslationFaults != nil {
		for _, f := range d.opts.TranslationFaults() {
			if f.Kind == "Gateway" {
				resp.Faults = append(resp.Faults, f)
			}
		}
	}
	writeJSON(w, d.opts.Logger, http.StatusOK, resp)
}
