package zksource

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// dubboKey is what tells Dubbo services of one interface apart: its providers' group, version
// and protocol (the URL's scheme, lower-cased).
type dubboKey struct{ group, version, scheme string }

// endpoint is one instance of a service, as decoded from its znode.
type endpoint struct {
	address string // an IP address, as netip prints it
	port    uint32 // 0: none (a Spring instance with only an sslPort)
	sslPort uint32 // Spring only; 0: none
	labels  map[string]string
}

// maxProviderName bounds the znode name decoded: ZooKeeper's own limit on a request is 1 MiB,
// and no provider URL comes near this.
const maxProviderName = 64 << 10

// decodeProvider reads the name of a znode under INTERFACE/providers as Dubbo's registry
// writes it: a provider URL, URL-encoded (java.net.URLEncoder: '+' for a space),
// PROTOCOL://IP:PORT/PATH?PARAMETERS. The address must be an IP: a STATIC ServiceEntry's
// endpoints are addresses, not names. The group and version are the URL's "group" and
// "version" parameters; the labels are its parameters that are valid Kubernetes labels, a
// parameter given more than once left out.
func decodeProvider(name string) (dubboKey, endpoint, error) {
	if len(name) > maxProviderName {
		return dubboKey{}, endpoint{}, fmt.Errorf("provider name of %d bytes", len(name))
	}
	raw, err := url.QueryUnescape(name)
	if err != nil {
		return dubboKey{}, endpoint{}, fmt.Errorf("provider name is not URL-encoded: %w", err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return dubboKey{}, endpoint{}, fmt.Errorf("provider URL %q: %w", raw, unwrapURLError(err))
	}
	if u.Scheme == "" || u.Opaque != "" {
		return dubboKey{}, endpoint{}, fmt.Errorf("provider URL %q is not PROTOCOL://IP:PORT/INTERFACE?PARAMETERS", raw)
	}
	addr, port, err := hostPort(u)
	if err != nil {
		return dubboKey{}, endpoint{}, fmt.Errorf("provider URL %q: %w", raw, err)
	}
	params, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return dubboKey{}, endpoint{}, fmt.Errorf("provider URL %q: parameters: %w", raw, err)
	}
	single := make(map[string]string, len(params))
	for k, vs := range params {
		if len(vs) == 1 {
			single[k] = vs[0]
		}
	}
	k := dubboKey{group: params.Get("group"), version: params.Get("version"), scheme: strings.ToLower(u.Scheme)}
	return k, endpoint{address: addr, port: port, labels: labelsOf(single)}, nil
}

// hostPort reads a URL's IP address and port.
func hostPort(u *url.URL) (string, uint32, error) {
	host, portText := u.Hostname(), u.Port()
	if portText == "" {
		return "", 0, errors.New("no port")
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("port %q is not 1-65535", portText)
	}
	addr, err := parseIP(host)
	if err != nil {
		return "", 0, err
	}
	return addr, uint32(port), nil
}

// parseIP reads an IP address without a zone, for an endpoint of a STATIC ServiceEntry.
func parseIP(s string) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return "", fmt.Errorf("address %q is not an IP address: a STATIC ServiceEntry's endpoints are IPs", s)
	}
	return a.String(), nil
}

// unwrapURLError drops url.Error's repetition of the URL, which the caller quotes already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// protocolOf is the Istio protocol of a Dubbo protocol. Istio has no Dubbo protocol: dubbo's
// own binary framing (and hessian, thrift and the rest) is opaque TCP to it. Triple is gRPC
// over HTTP/2 and gRPC is gRPC; rest and http are HTTP/1.1.
func protocolOf(scheme string) string {
	switch scheme {
	case "tri", "grpc":
		return "GRPC"
	case "rest", "http":
		return "HTTP"
	case "https":
		return "HTTPS"
	}
	return "TCP"
}
