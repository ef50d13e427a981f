package envoy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/mcpbridge/mcpbridge/translate"
)

// TestCredentialNameTLSIsForGatewaysOnly: istiod gives a sidecar no TLS for a DestinationRule
// (without workloadSelector) whose SIMPLE or MUTUAL settings name a credentialName, and a
// gateway the TLS: the clusters every client reads have none; the gateways' overlay has the
// cluster with it. TLS from files is everyone's: no overlay.
func TestCredentialNameTLSIsForGatewaysOnly(t *testing.T) {
	outs, faults := Build(decodeYAML(t, `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: nginx, namespace: default}
spec:
  hosts: [nginx.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}, {number: 8443, name: http-cred, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: nginx, namespace: default}
spec:
  host: nginx.example.com
  trafficPolicy:
    portLevelSettings:
    - port: {number: 80}
      tls: {mode: MUTUAL, clientCertificate: /etc/certs/client.crt, privateKey: /etc/certs/client.key}
    - port: {number: 8443}
      tls: {mode: MUTUAL, credentialName: client-credential, sni: nginx.example.com}
`), TranslatorOptions{})
	tlsOf := map[string]map[string]bool{} // collection → cluster → has TLS
	for _, r := range outs {
		if typeURL, _ := r.Encoded.Body(); typeURL != ClusterType || r.TypeURL == GRPCClusterType {
			continue
		}
		c := &clusterpb.Cluster{}
		mustUnmarshal(t, r, c)
		if err := c.ValidateAll(); err != nil {
			t.Errorf("%s %s: %v", r.TypeURL, r.Name, err)
		}
		if tlsOf[r.TypeURL] == nil {
			tlsOf[r.TypeURL] = map[string]bool{}
		}
		tlsOf[r.TypeURL][r.Name] = c.GetTransportSocket() != nil
	}
	gateways := translate.GatewayCollection(ClusterType)
	const files, cred = "outbound|80||nginx.example.com", "outbound|8443||nginx.example.com"
	if !tlsOf[ClusterType][files] || tlsOf[ClusterType][cred] {
		t.Errorf("clusters every client reads: TLS %v; want files' TLS and none from the credentialName", tlsOf[ClusterType])
	}
	if want := map[string]bool{cred: true}; !maps.Equal(tlsOf[gateways], want) {
		t.Errorf("gateways' overlay: %v, want %v", tlsOf[gateways], want)
	}
	if !slices.ContainsFunc(faults, func(f Fault) bool { return strings.Contains(f.Message, "sidecars get the cluster without TLS") }) {
		t.Errorf("no fault says the credential's secret is not served and sidecars get no TLS: %v", faults)
	}
}
