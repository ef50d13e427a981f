package zksource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// curatorInstance is the part of Curator's ServiceInstance, as Spring Cloud ZooKeeper writes
// it (JSON, by Jackson), that the source reads. Other fields (uriSpec, registrationTimeUTC,
// serviceType, payload's "@class") are ignored.
type curatorInstance struct {
	Address string `json:"address"`
	Port    *int64 `json:"port"`
	SSLPort *int64 `json:"sslPort"`
	Enabled *bool  `json:"enabled"`
	Payload *struct {
		// Metadata is a Map<String, String> in Spring Cloud's ZookeeperInstance; values that
		// are not strings are left out rather than faulting the instance.
		Metadata map[string]json.RawMessage `json:"metadata"`
	} `json:"payload"`
}

// errDisabled is an instance that Curator marks as disabled ("enabled": false): not a fault,
// and not an endpoint.
var errDisabled = errors.New("instance is disabled")

// decodeSpring reads a Spring Cloud ZooKeeper instance, the data of /services/NAME/ID. It
// needs an IP address (Spring Cloud ZooKeeper registers one with
// spring.cloud.zookeeper.discovery.prefer-ip-address=true; by default it registers the host
// name) and a port or an sslPort. Its labels are payload.metadata's string entries that are
// valid Kubernetes labels.
func decodeSpring(data []byte) (endpoint, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return endpoint{}, errors.New("no instance data: want Curator's ServiceInstance JSON")
	}
	var in curatorInstance
	if err := json.Unmarshal(data, &in); err != nil {
		return endpoint{}, fmt.Errorf("instance data is not Curator's ServiceInstance JSON: %w", err)
	}
	if in.Enabled != nil && !*in.Enabled {
		return endpoint{}, errDisabled
	}
	addr, err := parseIP(in.Address)
	if err != nil {
		return endpoint{}, fmt.Errorf("%w (Spring Cloud ZooKeeper registers its IP with spring.cloud.zookeeper.discovery.prefer-ip-address=true)", err)
	}
	port, err := instancePort("port", in.Port)
	if err != nil {
		return endpoint{}, err
	}
	sslPort, err := instancePort("sslPort", in.SSLPort)
	if err != nil {
		return endpoint{}, err
	}
	if port == 0 && sslPort == 0 {
		return endpoint{}, errors.New("instance has neither a port nor an sslPort")
	}
	ep := endpoint{address: addr, port: port, sslPort: sslPort}
	if in.Payload != nil {
		ep.labels = labelsOf(stringValues(in.Payload.Metadata))
	}
	return ep, nil
}

// instancePort reads an optional port: absent or null is 0.
func instancePort(field string, p *int64) (uint32, error) {
	if p == nil {
		return 0, nil
	}
	if *p < 1 || *p > 65535 {
		return 0, fmt.Errorf("%s %d is not 1-65535", field, *p)
	}
	return uint32(*p), nil
}

func stringValues(m map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(m))
	for k, raw := range m {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out[k] = s
		}
	}
	return out
}
