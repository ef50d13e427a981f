// Package zksource serves the service registries that live in ZooKeeper, Apache Dubbo's and
// Spring Cloud ZooKeeper's, as Istio ServiceEntries: a producer of the store, as the file
// source is. Its resources are owned by "zookeeper:NAME" and live in the namespace NAME, the
// source's name.
//
// # What it reads
//
// Dubbo's registry (DubboRoot, /dubbo by default) holds one znode per Java interface, named
// after it (URL-encoded), and under it a "providers" znode whose children are the providers:
// ephemeral znodes named by the provider's URL, URL-encoded, such as
//
//	dubbo://10.0.0.5:20880/com.example.DemoService?application=demo&group=g1&version=1.0.0&...
//
// Spring Cloud ZooKeeper (SpringRoot, /services by default) holds one znode per service name,
// and under it one znode per instance, named by its ID, whose data is Curator's
// ServiceInstance in JSON: address, port, sslPort, and payload.metadata, a map of strings.
// Dubbo 3's application-level service discovery writes the same layout under /services; its
// instances are read the same way, their port as HTTP.
//
// # ServiceEntries
//
// Every ServiceEntry has one host, resolution STATIC, location MESH_INTERNAL, no exportTo
// (it is visible mesh-wide), and one endpoint per instance. Its resource name is
// NAMESPACE/HOST: a host is a DNS-1123 subdomain, so it is a valid name as it is, and two
// services have two names exactly when they have two hosts.
//
// A Dubbo interface gives one ServiceEntry per group, version and protocol that its
// providers declare (the URL's "group" and "version" parameters, and its scheme). Its host is
// the interface's dot-separated parts, then "v-VERSION" and "g-GROUP" when they are not
// empty, then the protocol when it is not dubbo, then "dubbo":
//
//	com.example.DemoService                        → com.example.demoservice.dubbo
//	  version 1.0.0, group g1                      → com.example.demoservice.v-1-0-0.g-g1.dubbo
//	  version 1.0.0, protocol tri                  → com.example.demoservice.v-1-0-0.tri.dubbo
//
// Higress (registry/zookeeper) names the same service providers:INTERFACE:VERSION:GROUP,
// Dubbo's own service key, and serves it under that name plus ".zookeeper". A colon is not
// valid in a ServiceEntry host (istiod refuses it), so the same three parts are kept here as
// DNS labels instead. Each part becomes a label: ASCII letters lower-cased, every other
// character but a digit a '-', dashes trimmed; a part left empty becomes "x" and a hash of
// it, one longer than 63 characters is cut and ends with a hash. The protocol is part of the
// service, not only of its ports, because istiod sends every port of a ServiceEntry to every
// endpoint: a dubbo port and a tri port in one ServiceEntry would send triple traffic to
// providers that only serve dubbo.
//
// Its ports are every port its providers listen on, named PROTOCOL-PORT (dubbo-20880), and
// every endpoint maps each of them to its own port: a client may use any of the service's
// ports and reach every provider where it listens. The port's Istio protocol is TCP for
// dubbo, whose framing Istio does not know, and for every protocol not named here; GRPC for
// tri (Triple is gRPC over HTTP/2) and grpc; HTTP for rest and http; HTTPS for https. Two
// providers at one address and port are one endpoint, the first by znode name.
//
// A Spring Cloud service gives one ServiceEntry, whose host is its name's dot-separated parts
// as labels, then "spring" (orders-api → orders-api.spring). Its ports are HTTP ports
// (http-PORT) when every instance has a port, and HTTPS ports (https-PORT) when every instance
// has an sslPort, mapped as a Dubbo service's are; an HTTPS port whose number is also an HTTP
// one is left out. An instance with "enabled": false is not an endpoint.
//
// An endpoint's labels are its provider URL's parameters, or its instance's payload.metadata,
// that are valid Kubernetes labels: a key of at most 63 characters (letters, digits, '-', '_',
// '.'), with an optional DNS-1123 prefix and '/', and a value empty or of the same
// characters, at most 63. Others are left out, silently, and a parameter given twice too:
// application=demo, version=1.0.0, group=g1 and side=provider are labels; methods=a,b is not.
//
// An endpoint's address must be an IP address: that is what a STATIC ServiceEntry's endpoints
// are. Spring Cloud ZooKeeper registers host names unless
// spring.cloud.zookeeper.discovery.prefer-ip-address is set.
//
// # Faults
//
// A provider URL or an instance that cannot be decoded, a service whose ServiceEntry is not
// valid (the kinds package's validation, istiod's), and a service whose host is another's
// (two interfaces that differ only in case, say: the first by key is served) are faults,
// each naming its znode (Faults, and a warning in the log when it appears); the rest of the
// service, and the rest of the registry, are served. A service left without instances is
// removed.
//
// # Following changes
//
// The source watches, it never polls: a children watch on each root, on each interface's
// providers znode and on each Spring service, a data watch on each Spring instance, and an
// exists watch on a root or providers znode that does not exist yet. A watch fires once; the
// source reads the znode again, which sets it again. Events are gathered for 50ms, then what
// they touched is read (32 reads in flight) and the changes are written to the store at once
// (sink/ownerstate): the whole state the first time, so that what the owner held before a
// restart of the bridge and is no longer registered is removed, then only what changed.
//
// When the connection is lost, nothing is removed: the store keeps serving the last good
// state, and a fault says so. A connection found again in the same session needs nothing
// more: ZooKeeper sends the watches' events that were missed. A session that expired, its
// watches gone with it, is followed by a new one in which the source reads the whole registry
// again and writes the difference. Ready is closed once the registry has been read whole the
// first time; until then the store keeps what the owner held before, if anything.
package zksource
