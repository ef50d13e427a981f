package kinds

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// HostField is one host a resource defines or routes, and the field it is written in.
type HostField struct {
	Field string // "spec.hosts[0]"
	Host  string // as written; a Gateway's without its "namespace/" part
}

// HostsOf are the hosts a resource of a collection defines or routes, which authorization
// holds to the producer's namespaces (authz.Scope.Hosts): a ServiceEntry's hosts, a
// VirtualService's hosts, a DestinationRule's host, a Gateway's servers' hosts (the part
// after "namespace/"). Other kinds name none: a Sidecar's egress hosts only narrow what its
// own namespace imports, and a WorkloadEntry joins only ServiceEntries of its own namespace.
// The body is decoded here; an error is a body that does not decode (the store's validation
// refuses it as well).
func HostsOf(collection string, r *mcpapi.Resource) ([]HostField, error) {
	k, ok := ByCollection(collection)
	if !ok || !hostKinds[k.Kind] {
		return nil, nil
	}
	msg := k.New()
	if err := proto.Unmarshal(r.GetBody().GetValue(), msg); err != nil {
		return nil, fmt.Errorf("body does not unmarshal as %s: %w", k.Message, err)
	}
	var out []HostField
	list := func(field string, hosts []string) {
		for i, h := range hosts {
			out = append(out, HostField{Field: fmt.Sprintf("%s[%d]", field, i), Host: h})
		}
	}
	switch m := msg.(type) {
	case *networking.ServiceEntry:
		list("spec.hosts", m.GetHosts())
	case *networking.VirtualService:
		list("spec.hosts", m.GetHosts())
	case *networking.DestinationRule:
		out = append(out, HostField{Field: "spec.host", Host: m.GetHost()})
	case *networking.Gateway:
		for i, s := range m.GetServers() {
			for j, h := range s.GetHosts() {
				if _, name, ok := strings.Cut(h, "/"); ok {
					h = name
				}
				out = append(out, HostField{Field: fmt.Sprintf("spec.servers[%d].hosts[%d]", i, j), Host: h})
			}
		}
	}
	return out, nil
}

// hostKinds are the kinds HostsOf reads.
var hostKinds = map[string]bool{"ServiceEntry": true, "VirtualService": true, "DestinationRule": true, "Gateway": true}
