package kinds

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// contractRow is one row of the naming table of CONTRACT.md section 5, written out by hand so
// that the test does not derive its expectations from the code under test.
type contractRow struct {
	kind, group, version, collection, xds, amcs string
	// aliasCollections and aliasXDS are the other versions' names.
	aliasCollections, aliasXDS []string
}

var contractTable = []contractRow{
	{
		"ServiceEntry", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/serviceentries", "networking.istio.io/v1alpha3/ServiceEntry",
		"type.googleapis.com/istio.networking.v1alpha3.ServiceEntry",
		[]string{"istio/networking/v1beta1/serviceentries", "istio/networking/v1/serviceentries"},
		[]string{"networking.istio.io/v1beta1/ServiceEntry", "networking.istio.io/v1/ServiceEntry"},
	},
	{
		"VirtualService", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/virtualservices", "networking.istio.io/v1alpha3/VirtualService",
		"type.googleapis.com/istio.networking.v1alpha3.VirtualService",
		[]string{"istio/networking/v1beta1/virtualservices", "istio/networking/v1/virtualservices"},
		[]string{"networking.istio.io/v1beta1/VirtualService", "networking.istio.io/v1/VirtualService"},
	},
	{
		"DestinationRule", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/destinationrules", "networking.istio.io/v1alpha3/DestinationRule",
		"type.googleapis.com/istio.networking.v1alpha3.DestinationRule",
		[]string{"istio/networking/v1beta1/destinationrules", "istio/networking/v1/destinationrules"},
		[]string{"networking.istio.io/v1beta1/DestinationRule", "networking.istio.io/v1/DestinationRule"},
	},
	{
		"Gateway", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/gateways", "networking.istio.io/v1alpha3/Gateway",
		"type.googleapis.com/istio.networking.v1alpha3.Gateway",
		[]string{"istio/networking/v1beta1/gateways", "istio/networking/v1/gateways"},
		[]string{"networking.istio.io/v1beta1/Gateway", "networking.istio.io/v1/Gateway"},
	},
	{
		"Sidecar", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/sidecars", "networking.istio.io/v1alpha3/Sidecar",
		"type.googleapis.com/istio.networking.v1alpha3.Sidecar",
		[]string{"istio/networking/v1beta1/sidecars", "istio/networking/v1/sidecars"},
		[]string{"networking.istio.io/v1beta1/Sidecar", "networking.istio.io/v1/Sidecar"},
	},
	{
		"EnvoyFilter", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/envoyfilters", "networking.istio.io/v1alpha3/EnvoyFilter",
		"type.googleapis.com/istio.networking.v1alpha3.EnvoyFilter",
		nil, nil, // Istio serves EnvoyFilter as v1alpha3 only
	},
	{
		"WorkloadEntry", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/workloadentries", "networking.istio.io/v1alpha3/WorkloadEntry",
		"type.googleapis.com/istio.networking.v1alpha3.WorkloadEntry",
		[]string{"istio/networking/v1beta1/workloadentries", "istio/networking/v1/workloadentries"},
		[]string{"networking.istio.io/v1beta1/WorkloadEntry", "networking.istio.io/v1/WorkloadEntry"},
	},
	{
		"WorkloadGroup", "networking.istio.io", "v1alpha3",
		"istio/networking/v1alpha3/workloadgroups", "networking.istio.io/v1alpha3/WorkloadGroup",
		"type.googleapis.com/istio.networking.v1alpha3.WorkloadGroup",
		[]string{"istio/networking/v1beta1/workloadgroups", "istio/networking/v1/workloadgroups"},
		[]string{"networking.istio.io/v1beta1/WorkloadGroup", "networking.istio.io/v1/WorkloadGroup"},
	},
	{
		"AuthorizationPolicy", "security.istio.io", "v1beta1",
		"istio/security/v1beta1/authorizationpolicies", "security.istio.io/v1beta1/AuthorizationPolicy",
		"type.googleapis.com/istio.security.v1beta1.AuthorizationPolicy",
		[]string{"istio/security/v1/authorizationpolicies"},
		[]string{"security.istio.io/v1/AuthorizationPolicy"},
	},
	{
		"PeerAuthentication", "security.istio.io", "v1beta1",
		"istio/security/v1beta1/peerauthentications", "security.istio.io/v1beta1/PeerAuthentication",
		"type.googleapis.com/istio.security.v1beta1.PeerAuthentication",
		[]string{"istio/security/v1/peerauthentications"},
		[]string{"security.istio.io/v1/PeerAuthentication"},
	},
	{
		"RequestAuthentication", "security.istio.io", "v1beta1",
		"istio/security/v1beta1/requestauthentications", "security.istio.io/v1beta1/RequestAuthentication",
		"type.googleapis.com/istio.security.v1beta1.RequestAuthentication",
		[]string{"istio/security/v1/requestauthentications"},
		[]string{"security.istio.io/v1/RequestAuthentication"},
	},
	// The kinds istiod also subscribes to (Istio's collections.Pilot), beyond the contract's
	// table: each by the type URL istiod asks for, its schema's preferred version.
	{
		"ProxyConfig", "networking.istio.io", "v1beta1",
		"istio/networking/v1beta1/proxyconfigs", "networking.istio.io/v1beta1/ProxyConfig",
		"type.googleapis.com/istio.networking.v1beta1.ProxyConfig",
		nil, nil, // Istio serves ProxyConfig as v1beta1 only
	},
	{
		"Telemetry", "telemetry.istio.io", "v1alpha1",
		"istio/telemetry/v1alpha1/telemetries", "telemetry.istio.io/v1alpha1/Telemetry",
		"type.googleapis.com/istio.telemetry.v1alpha1.Telemetry",
		[]string{"istio/telemetry/v1/telemetries"},
		[]string{"telemetry.istio.io/v1/Telemetry"},
	},
	{
		"WasmPlugin", "extensions.istio.io", "v1alpha1",
		"istio/extensions/v1alpha1/wasmplugins", "extensions.istio.io/v1alpha1/WasmPlugin",
		"type.googleapis.com/istio.extensions.v1alpha1.WasmPlugin",
		nil, nil,
	},
	{
		"TrafficExtension", "extensions.istio.io", "v1alpha1",
		"istio/extensions/v1alpha1/trafficextensions", "extensions.istio.io/v1alpha1/TrafficExtension",
		"type.googleapis.com/istio.extensions.v1alpha1.TrafficExtension",
		nil, nil,
	},
}

// istiodTypeURLs are the type URLs istiod asks an xds:// config source for, besides
// core/v1alpha1/MeshConfig: the GroupVersionKind of every schema of Istio's collections.Pilot,
// written out from Istio's pkg/config/schema/collections (istio.io/istio at the commit of
// 2026-08-27), as pkg/adsc's ConfigInitialRequests sends them.
var istiodTypeURLs = []string{
	"security.istio.io/v1/AuthorizationPolicy",
	"networking.istio.io/v1/DestinationRule",
	"networking.istio.io/v1alpha3/EnvoyFilter",
	"networking.istio.io/v1/Gateway",
	"security.istio.io/v1/PeerAuthentication",
	"networking.istio.io/v1beta1/ProxyConfig",
	"security.istio.io/v1/RequestAuthentication",
	"networking.istio.io/v1/ServiceEntry",
	"networking.istio.io/v1/Sidecar",
	"telemetry.istio.io/v1/Telemetry",
	"extensions.istio.io/v1alpha1/TrafficExtension",
	"networking.istio.io/v1/VirtualService",
	"extensions.istio.io/v1alpha1/WasmPlugin",
	"networking.istio.io/v1/WorkloadEntry",
	"networking.istio.io/v1/WorkloadGroup",
}

// TestEveryTypeIstiodAsksForIsAKind: istiod waits for an answer to every type it asks for and
// reads what it gets; each must be a kind of the table, not an opaque collection.
func TestEveryTypeIstiodAsksForIsAKind(t *testing.T) {
	kinds := map[string]bool{}
	for _, u := range istiodTypeURLs {
		k, ok := ByXDSTypeURL(u)
		if !ok {
			t.Errorf("istiod asks for %s: not a kind of the table", u)
			continue
		}
		kinds[k.Kind] = true
	}
	if len(kinds) != len(Kinds()) {
		t.Errorf("istiod asks for %d kinds, the table has %d: every kind is one istiod reads", len(kinds), len(Kinds()))
	}
}

// TestKindsMatchContractTable: the table of CONTRACT.md section 5, then the kinds istiod reads
// beyond it.
func TestKindsMatchContractTable(t *testing.T) {
	kinds := Kinds()
	if len(kinds) != len(contractTable) {
		t.Fatalf("Kinds() has %d kinds, the contract table %d", len(kinds), len(contractTable))
	}
	for i, want := range contractTable {
		k := kinds[i]
		t.Run(want.kind, func(t *testing.T) {
			got := [...]string{k.Kind, k.Group, k.Version, k.Collection, k.XDSTypeURL, k.AMCSTypeURL}
			exp := [...]string{want.kind, want.group, want.version, want.collection, want.xds, want.amcs}
			if got != exp {
				t.Errorf("kind %d:\n got %q\nwant %q", i, got, exp)
			}
			if wantMsg := protoreflect.FullName(strings.TrimPrefix(want.amcs, "type.googleapis.com/")); k.Message != wantMsg {
				t.Errorf("Message = %q, want %q", k.Message, wantMsg)
			}
			m := k.New()
			if m == nil || m.ProtoReflect().Descriptor().FullName() != k.Message {
				t.Fatalf("New() returned %v, want an empty %s", m, k.Message)
			}
			if k.New() == m {
				t.Error("New() returned the same message twice; each call must return a fresh one")
			}
		})
	}
}

func TestLookupsByEveryName(t *testing.T) {
	for _, row := range contractTable {
		t.Run(row.kind, func(t *testing.T) {
			check := func(what, name string, k *Kind, ok bool) {
				t.Helper()
				if !ok || k == nil || k.Kind != row.kind || k.Collection != row.collection {
					t.Errorf("%s(%q) = %v, %v; want kind %s", what, name, k, ok, row.kind)
				}
			}
			for _, c := range append([]string{row.collection}, row.aliasCollections...) {
				k, ok := ByCollection(c)
				check("ByCollection", c, k, ok)
				if got := CanonicalCollection(c); got != row.collection {
					t.Errorf("CanonicalCollection(%q) = %q, want %q", c, got, row.collection)
				}
			}
			for _, u := range append([]string{row.xds}, row.aliasXDS...) {
				k, ok := ByXDSTypeURL(u)
				check("ByXDSTypeURL", u, k, ok)
				apiVersion, kind := u[:strings.LastIndex(u, "/")], u[strings.LastIndex(u, "/")+1:]
				k, ok = ByGroupVersionKind(apiVersion, kind)
				check("ByGroupVersionKind", u, k, ok)
			}
			k, ok := ByAMCSTypeURL(row.amcs)
			check("ByAMCSTypeURL", row.amcs, k, ok)
		})
	}
}

func TestUnknownNames(t *testing.T) {
	for _, c := range []string{
		"", "istio/networking/v1alpha3/unknowns", "istio/networking/v1/envoyfilters",
		"istio/networking/v1/proxyconfigs", "istio/extensions/v1/wasmplugins", "istio/telemetry/v1beta1/telemetries",
		"istio/networking/v1alpha3/ServiceEntries", "istio/security/v1alpha1/authorizationpolicies",
		"example.com/opaque",
	} {
		if k, ok := ByCollection(c); ok {
			t.Errorf("ByCollection(%q) = %s, want not found", c, k.Kind)
		}
		if got := CanonicalCollection(c); got != c {
			t.Errorf("CanonicalCollection(%q) = %q, want it unchanged", c, got)
		}
	}
	for _, u := range []string{"", "networking.istio.io/v1/EnvoyFilter", "networking.istio.io/v1alpha3/serviceentry", "istio.networking.v1alpha3.ServiceEntry",
		"networking.istio.io/v1/ProxyConfig", "extensions.istio.io/v1/WasmPlugin", "telemetry.istio.io/v1beta1/Telemetry"} {
		if k, ok := ByXDSTypeURL(u); ok {
			t.Errorf("ByXDSTypeURL(%q) = %s, want not found", u, k.Kind)
		}
	}
	// The AMCS name is the message's type URL: the alias versions have no messages of their own.
	for _, u := range []string{"networking.istio.io/v1alpha3/ServiceEntry", "type.googleapis.com/istio.networking.v1.ServiceEntry"} {
		if k, ok := ByAMCSTypeURL(u); ok {
			t.Errorf("ByAMCSTypeURL(%q) = %s, want not found", u, k.Kind)
		}
	}
	for _, gvk := range [][2]string{
		{"networking.istio.io", "v1alpha3/ServiceEntry"}, // must not pass by string concatenation
		{"networking.istio.io/v1alpha3", "serviceentry"},
		{"networking.istio.io/v2", "ServiceEntry"},
		{"v1", "ServiceEntry"},
		{"security.istio.io/v1", "ServiceEntry"},
	} {
		if k, ok := ByGroupVersionKind(gvk[0], gvk[1]); ok {
			t.Errorf("ByGroupVersionKind(%q, %q) = %s, want not found", gvk[0], gvk[1], k.Kind)
		}
	}
}

func TestDefaultCollections(t *testing.T) {
	got := DefaultCollections()
	want := make([]string, len(contractTable))
	for i, row := range contractTable {
		want[i] = row.collection
	}
	if !slices.Equal(got, want) {
		t.Fatalf("DefaultCollections() = %q, want %q", got, want)
	}
	got[0] = "changed by a caller"
	if DefaultCollections()[0] != want[0] {
		t.Error("DefaultCollections returns a slice shared between callers")
	}
}

func TestKindsIsACopy(t *testing.T) {
	ks := Kinds()
	ks[0] = nil
	if Kinds()[0] == nil {
		t.Error("Kinds returns a slice shared between callers")
	}
}

func TestMeshConfigNames(t *testing.T) {
	if MeshConfigTypeURL != "core/v1alpha1/MeshConfig" {
		t.Errorf("MeshConfigTypeURL = %q, istiod asks for core/v1alpha1/MeshConfig", MeshConfigTypeURL)
	}
	if got := (&meshconfig.MeshConfig{}).ProtoReflect().Descriptor().FullName(); got != MeshConfigMessage {
		t.Errorf("MeshConfigMessage = %q, the istio.io/api message is %q", MeshConfigMessage, got)
	}
	if _, ok := ByXDSTypeURL(MeshConfigTypeURL); ok {
		t.Error("MeshConfig must not be a kind of the table: it is not stored as a collection")
	}
}

func TestCollectionOfTakesEveryNameOfAKind(t *testing.T) {
	const want = "istio/networking/v1alpha3/serviceentries"
	for _, name := range []string{want, "istio/networking/v1beta1/serviceentries", "networking.istio.io/v1alpha3/ServiceEntry",
		"networking.istio.io/v1/ServiceEntry", "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"} {
		if got := CollectionOf(name); got != want {
			t.Errorf("CollectionOf(%q) = %q, want %q", name, got, want)
		}
	}
	for _, other := range []string{"type.googleapis.com/envoy.config.cluster.v3.Cluster", "example.com/opaque"} {
		if got := CollectionOf(other); got != other {
			t.Errorf("CollectionOf(%q) = %q, want itself", other, got)
		}
	}
}
