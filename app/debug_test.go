package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/app/admin"
	"github.com/mcpbridge/mcpbridge/source"
)

// getJSON decodes a debug endpoint's answer, checking its status and content type.
func getJSON(t *testing.T, url string, wantCode int, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s = %d, want %d", url, resp.StatusCode, wantCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", url, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func TestDebugCollectionsListsCountsAndVersions(t *testing.T) {
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "p1")
	p.push(t, seColl, serviceEntry("ns/a", "a.example"), serviceEntry("ns/b", "b.example"))
	rev := b.Store().View().Collection(seColl).Revision
	// The translation writes what the push derives; the store's revision is read after it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.translator.WaitFor(ctx, rev); err != nil {
		t.Fatal(err)
	}

	var got admin.CollectionsResponse
	getJSON(t, b.httpURL+"/debug/collections", 200, &got)
	if got.Revision != b.Store().View().Revision() {
		t.Errorf("revision = %d, want the store's %d", got.Revision, b.Store().View().Revision())
	}
	var se *admin.CollectionSummary
	for i, c := range got.Collections {
		if c.Name == seColl {
			se = &got.Collections[i]
		}
	}
	if se == nil || se.Count != 2 || se.Kind != "ServiceEntry" || se.Revision != rev || se.Version != fmt.Sprint(rev) || se.Changed.IsZero() {
		t.Fatalf("serviceentries = %+v in %+v", se, got)
	}
}

func TestDebugCollectionDumpsResourcesByAnyName(t *testing.T) {
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "p1")
	p.push(t, seColl, serviceEntry("ns/a", "a.example"))

	// The MCP collection, an alias, the xDS and the AMCS type URL name the same collection.
	for _, name := range []string{seColl, "istio/networking/v1/serviceentries", "networking.istio.io/v1/ServiceEntry", "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"} {
		var got struct {
			admin.CollectionSummary
			Resources []struct {
				Name, Version, Owner string
				Resource             struct {
					Metadata struct{ Name, Version string }
					Body     struct {
						Type  string   `json:"@type"`
						Hosts []string `json:"hosts"`
					}
				}
			}
		}
		getJSON(t, b.httpURL+"/debug/collections/"+name, 200, &got)
		if got.Name != seColl || len(got.Resources) != 1 {
			t.Fatalf("%s: %+v", name, got)
		}
		r := got.Resources[0]
		if r.Name != "ns/a" || r.Owner != "producer:p1" || r.Version == "" || r.Resource.Metadata.Name != "ns/a" ||
			r.Resource.Body.Type != "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry" || len(r.Resource.Body.Hosts) != 1 || r.Resource.Body.Hosts[0] != "a.example" {
			t.Fatalf("%s: resource %+v", name, r)
		}
	}
	var e struct{ Error string }
	getJSON(t, b.httpURL+"/debug/collections/example.com/nothing", 404, &e)
	if e.Error == "" {
		t.Fatal("404 without an error message")
	}
}

func TestDebugClientsShowsSubscriptionsACKsAndNACKs(t *testing.T) {
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "p1")
	p.push(t, seColl, serviceEntry("ns/a", "a.example"))
	c := subscribe(t, b.grpcAddr, "sink-1", seColl)
	c.ack(c.Recv())
	p.push(t, seColl, serviceEntry("ns/a", "a2.example"))
	c.nack(c.Recv(), "ns/a: host a2.example is not allowed here")

	var got admin.ClientsResponse
	deadline := waitUntil(t, func() bool {
		getJSON(t, b.httpURL+"/debug/clients", 200, &got)
		return len(got.Clients) == 1 && len(got.Clients[0].Subscriptions) == 1 && got.Clients[0].Subscriptions[0].LastNACK != nil
	})
	if !deadline {
		t.Fatalf("no NACK recorded: %+v", got)
	}
	ci := got.Clients[0]
	sub := ci.Subscriptions[0]
	if ci.Node != "sink-1" || ci.Protocol != source.ProtocolResourceSource || ci.Peer == "" || sub.Collection != seColl ||
		sub.LastACK == nil || sub.LastNACK.Message != "ns/a: host a2.example is not allowed here" || sub.SentVersion == "" {
		t.Fatalf("client = %+v, subscription %+v", ci, sub)
	}

	var view admin.ClientView
	getJSON(t, fmt.Sprintf("%s/debug/clients/%d", b.httpURL, ci.ID), 200, &view)
	if view.Node != "sink-1" || len(view.View) != 1 || view.View[0].UpToDate || len(view.View[0].Resources) != 1 || view.View[0].Resources[0].Name != "ns/a" {
		t.Fatalf("view of a client that NACKed the latest version = %+v", view)
	}
	var e struct{ Error string }
	getJSON(t, b.httpURL+"/debug/clients/999", 404, &e)
	getJSON(t, b.httpURL+"/debug/clients/me", 400, &e)
	if e.Error == "" {
		t.Fatal("400 without an error message")
	}
}

func TestDebugProducersShowsTheSinksVerdicts(t *testing.T) {
	b := start(t, nil)
	p := dialProducer(t, b.grpcAddr, "p1")
	p.push(t, seColl, serviceEntry("ns/a", "a.example"))
	p.push(t, seColl, serviceEntry("", "nameless.example"))

	var got admin.ProducersResponse
	getJSON(t, b.httpURL+"/debug/producers", 200, &got)
	if len(got.Producers) != 1 || got.Peers == nil || got.FileFaults == nil || got.TranslationFaults == nil {
		t.Fatalf("producers = %+v", got)
	}
	pi := got.Producers[0]
	if pi.Owner != "producer:p1" || !pi.Connected || pi.Streams != 1 || pi.LastACK == nil || pi.LastACK.Collection != seColl ||
		pi.LastNACK == nil || pi.LastNACK.Message == "" {
		t.Fatalf("producer = %+v (nack %+v)", pi, pi.LastNACK)
	}
	p.Close()
	waitUntil(t, func() bool {
		getJSON(t, b.httpURL+"/debug/producers", 200, &got)
		return len(got.Producers) == 1 && !got.Producers[0].Connected
	})
}

// Every shadowed resource is shown (the served entry names the owners shadowed) and metered
// (mcpbridge_shadowed_resources per collection).
func TestShadowedResourcesAreShownAndMetered(t *testing.T) {
	b := start(t, nil)
	dialProducer(t, b.grpcAddr, "a").push(t, seColl, serviceEntry("ns/x", "a.example"))
	dialProducer(t, b.grpcAddr, "b").push(t, seColl, serviceEntry("ns/x", "b.example"), serviceEntry("ns/y", "y.example"))
	var got struct {
		admin.CollectionSummary
		Resources []admin.ResourceDump
	}
	getJSON(t, b.httpURL+"/debug/collections/"+seColl, 200, &got)
	if got.Shadowed != 1 || len(got.Resources) != 2 {
		t.Fatalf("summary %+v", got.CollectionSummary)
	}
	if x := got.Resources[0]; x.Name != "ns/x" || x.Owner != "producer:a" || !slices.Equal(x.Shadowed, []string{"producer:b"}) {
		t.Fatalf("ns/x: %+v", x)
	}
	if y := got.Resources[1]; len(y.Shadowed) != 0 {
		t.Fatalf("ns/y, held by one owner, shows shadowed %v", y.Shadowed)
	}
	eventually(t, b, 1, "mcpbridge_shadowed_resources", "collection", seColl)
}
