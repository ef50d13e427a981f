package envoy

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/store"
)

// A plain cluster is the common one: the EDS cluster of a STATIC host's port that no
// DestinationRule touches, as addCluster builds it for Envoy. Two such clusters differ only
// in their name, which the cluster carries three times (name, alt_stat_name, and its EDS
// service_name); the rest depends on the port's protocol alone (its upstream HTTP options).
// At 1,000,000 services, building, validating and marshalling that message for each was a
// tenth of the translation, and its garbage a share of every collection of the heap.
//
// plainClusterWire writes the encoding from parts made once per protocol by addCluster's own
// message path (plainClusterParts), exactly as that path encodes the cluster of any name:
// TestPlainClusterEncodingIsTheMessagePath holds the two together, and the parts check
// themselves when they are made (two names must give the same parts, else the fast path is
// off and the message path builds every cluster).

// Field numbers of envoy.config.cluster.v3.Cluster and of its EdsClusterConfig.
const (
	clusterNameField        = 1  // .name
	clusterEDSConfigField   = 3  // .eds_cluster_config
	clusterAltStatNameField = 28 // .alt_stat_name
	edsServiceNameField     = 2  // EdsClusterConfig.service_name
)

// plainClusterTemplate is a protocol's plain cluster in parts: the cluster's encoding with
// holes for its name, its EDS config and its alt_stat_name, and the EDS config's with a hole
// for its service_name.
type plainClusterTemplate struct {
	cluster, eds wireTemplate
	err          error
}

// plainClusterParts are the templates by protocol, made once.
var plainClusterParts = func() (p [protoOther + 1]plainClusterTemplate) {
	for proto := range p {
		p[proto] = newPlainClusterTemplate(protocol(proto))
	}
	return p
}()

// newPlainClusterTemplate makes a protocol's template from the message path's encodings of
// two names, which must give the same parts.
func newPlainClusterTemplate(proto protocol) plainClusterTemplate {
	a, err := plainClusterTemplateOf("outbound|80||a.example.com", proto)
	if err != nil {
		return plainClusterTemplate{err: err}
	}
	b, err := plainClusterTemplateOf("outbound|8080|v1|b.example.org", proto)
	if err != nil {
		return plainClusterTemplate{err: err}
	}
	if !sameParts(a.cluster, b.cluster) || !sameParts(a.eds, b.eds) {
		return plainClusterTemplate{err: fmt.Errorf("plain cluster of protocol %d: the name is not only in its three fields", proto)}
	}
	return a
}

func plainClusterTemplateOf(name string, pr protocol) (plainClusterTemplate, error) {
	enc, err := plainClusterByMessage(name, pr)
	if err != nil {
		return plainClusterTemplate{}, err
	}
	c := &clusterpb.Cluster{}
	if err := proto.Unmarshal(enc, c); err != nil {
		return plainClusterTemplate{}, err
	}
	if c.GetName() != name || c.GetAltStatName() != name+statPrefixDelimiter || c.GetEdsClusterConfig().GetServiceName() != name {
		return plainClusterTemplate{}, fmt.Errorf("plain cluster %q: not named as expected", name)
	}
	var t plainClusterTemplate
	if t.cluster, err = newWireTemplateOf(enc, clusterNameField, clusterEDSConfigField, clusterAltStatNameField); err != nil {
		return t, err
	}
	t.eds, err = newWireTemplate(c.GetEdsClusterConfig(), edsServiceNameField)
	return t, err
}

// plainClusterByMessage is the encoding addCluster's message path gives the plain cluster of a
// name and protocol: a STATIC host's, with no DestinationRule, for Envoy alone.
func plainClusterByMessage(name string, proto protocol) ([]byte, error) {
	t := NewTranslator(TranslatorOptions{LazyProxyless: true})
	b := &hostBuild{host: "example.com", se: &serviceEntry{resolution: networking.ServiceEntry_STATIC}}
	b.build = newBuild(t, kindServiceEntry, "ns/example")
	b.addClusterMessage(name, port{number: 80, protocol: proto}, "", effectivePolicy(nil, nil, 80), nil)
	if len(b.u.outputs) != 1 || len(b.fs) > 0 {
		return nil, fmt.Errorf("plain cluster %q: %d outputs, faults %v", name, len(b.u.outputs), b.fs)
	}
	return b.u.outputs[0].value(), nil
}

func sameParts(a, b wireTemplate) bool {
	if len(a.parts) != len(b.parts) {
		return false
	}
	for i := range a.parts {
		if !bytes.Equal(a.parts[i], b.parts[i]) {
			return false
		}
	}
	return true
}

// plainCluster reports whether addCluster may write a cluster from parts: a STATIC host's with
// no DestinationRule, while the proxyless outputs (which need the message) are not built.
func (b *hostBuild) plainCluster(p port) bool {
	return b.dr == nil && b.se.resolution == networking.ServiceEntry_STATIC && !b.t.proxylessFor(b.host) &&
		plainClusterParts[p.protocol].err == nil
}

// putPlainCluster adds the plain cluster of a name from parts.
func (b *hostBuild) putPlainCluster(name string, proto protocol) {
	t := &plainClusterParts[proto]
	if name == "" || !utf8.ValidString(name) { // what validation or proto.Marshal would refuse
		b.invalid("Cluster", name, fmt.Errorf("cluster name %q: empty or not UTF-8", name))
		return
	}
	edsLen := t.eds.size() + mapStringField(edsServiceNameField, name)
	altLen := len(name) + len(statPrefixDelimiter)
	size := t.cluster.size() + mapStringField(clusterNameField, name) + messageField(clusterEDSConfigField, edsLen) +
		protowire.SizeTag(clusterAltStatNameField) + protowire.SizeBytes(altLen)
	enc, err := store.EncodeBody(name, ClusterType, size, func(out []byte) ([]byte, error) {
		out = append(out, t.cluster.parts[0]...)
		out = appendStringField(out, clusterNameField, name)
		out = append(out, t.cluster.parts[1]...)
		out = appendTagLen(out, clusterEDSConfigField, edsLen)
		out = append(out, t.eds.parts[0]...)
		out = appendStringField(out, edsServiceNameField, name)
		out = append(out, t.eds.parts[1]...)
		out = append(out, t.cluster.parts[2]...)
		out = appendTagLen(out, clusterAltStatNameField, altLen)
		out = append(append(out, name...), statPrefixDelimiter...)
		return append(out, t.cluster.parts[3]...), nil
	})
	if err != nil {
		b.invalid("Cluster", name, err)
		return
	}
	b.u.set(output{b.collection(ClusterType), enc})
}
