// Package envoy derives Envoy resources (clusters, load assignments, listeners, route
// configurations) from the Istio config in the store, for Envoy proxies and for proxyless
// gRPC clients (grpc-go's xDS client) alike.
//
// The Controller watches the input collections (ServiceEntry, WorkloadEntry, DestinationRule,
// VirtualService, Gateway), reads only what changed since the revisions it processed, and
// writes the four derived collections, named by their Envoy type URLs, in one store.Apply
// under the owner "translate". Under it, the Translator is the pure layer (no store, no
// goroutines): it recomputes only the hosts a change touches. Build translates a whole set of
// resources at once.
//
// # Names
//
//   - Cluster and ClusterLoadAssignment: outbound|PORT||HOST, and outbound|PORT|SUBSET|HOST for
//     each subset of the host's DestinationRule. An EDS cluster's service_name is its own name.
//   - Route configuration of one host and port: outbound|PORT||HOST, with one virtual host
//     "HOST:PORT" whose domains are HOST and HOST:PORT.
//   - API listener, for proxyless gRPC clients dialling xds:///HOST:PORT: HOST:PORT, an
//     HttpConnectionManager with RDS (ADS) of outbound|PORT||HOST, router filter last.
//   - Outbound listener of a port, for Envoy sidecars: 0.0.0.0_PORT, bound to 0.0.0.0:PORT (no
//     traffic capture is assumed), with RDS of the route configuration PORT ("9080"), which
//     holds every HTTP host's virtual host on that port.
//   - Gateway listeners and routes, per gateway class (the gateway proxies of one set of
//     labels, translate.GatewayClass): gateway.CLASS/0.0.0.0_PORT, with RDS of
//     gateway.CLASS/http.PORT for the port's plaintext HTTP servers, or one filter chain per
//     HTTPS server with RDS of gateway.CLASS/https.PORT.PORTNAME.NAME.NAMESPACE. These are
//     Istio's names within one gateway proxy's configuration, behind the class's prefix: the
//     bridge serves one collection to every client.
//
// Short host names ("reviews") are completed in the resource's namespace
// ("reviews.bookinfo.svc.cluster.local"); ServiceEntry hosts are taken as written.
//
// # Translation
//
// ServiceEntry: one cluster per host and port. STATIC and NONE are EDS clusters (ADS config
// source) with a load assignment of the inline endpoints and of the WorkloadEntries of the same
// namespace that the workloadSelector selects; DNS is STRICT_DNS and DNS_ROUND_ROBIN is
// LOGICAL_DNS (its first endpoint only), with the load assignment inline, and the host itself
// as the endpoint when none is listed. An endpoint's port is its own port of the service port's
// name, else the service port's targetPort, else its number. Endpoints are grouped by locality
// ("region/zone/subzone"); a locality's weight is the sum of its endpoints' weights (at least 1:
// grpc-go ignores a locality without one). Labels go to the endpoint's "envoy.lb" metadata, the
// network to "istio". An address:port listed twice is kept once (grpc-go rejects duplicates).
// Ports whose protocol is not HTTP-based (TCP, TLS, HTTPS, MONGO...) get clusters but no
// routes and no listeners. A port's protocol is its protocol field alone, as istiod reads a
// ServiceEntry's (not its name); unset or unknown is protocol sniffing, whose cluster uses the
// downstream protocol and whose routes are those of HTTP.
//
// Clusters are built as istiod builds them (buildCluster, applyTrafficPolicy): alt_stat_name
// "NAME;", an empty common_lb_config, EDS over ADS without an initial fetch timeout; DNS
// clusters with V4_ONLY lookups, the c-ares resolver, 100ms jitter, a 60s refresh and the
// records' TTLs; HTTP/2 for HTTP2 and GRPC ports, no protocol options for HTTP ones.
// Proxyless gRPC clients (node metadata GENERATOR=grpc) are served each cluster in the form
// istiod's gRPC generator builds (GRPCClusterType, under the same name): round robin unless a
// rule asks for LEAST_REQUEST or a consistent hash, a circuit breaker for http2MaxRequests
// only, and TLS only for ISTIO_MUTUAL, by certificate providers.
//
// DestinationRule: the rule for the host (exact before wildcard, oldest first), with the
// traffic policy merged as istiod merges it: the top level, or the port-level entry for the
// cluster's port alone (its unset settings are defaults, not the top level's); then the
// subset's policy replaces each of loadBalancer, connectionPool, outlierDetection and tls it
// sets, or all four when it has an entry for the port. Simple load balancers map to their
// Envoy policies (unset is LEAST_REQUEST, Istio's default), warmup to a slow start;
// consistentHash is a RING_HASH (or MAGLEV) cluster plus a hash policy on the routes whose
// single destination it is; the connection pool sets circuit-breaker thresholds (unset ones
// unlimited, as Istio sets them) and the retry budget, the connect timeout (10s by default),
// TCP keepalive, and HTTP protocol options (on TCP clusters too, as istiod sets them); outlier
// detection follows Istio (success-rate ejection off, panic threshold minHealthPercent). TLS
// origination (SIMPLE, MUTUAL, ISTIO_MUTUAL) is istiod's upstream TLS context: the workload's
// certificate ("default", "ROOTCA") and files ("file-cert:CERT~KEY", "file-root:CA", the
// system CA by default) from the proxy's agent, credentialName as "kubernetes://NAME" over
// ADS, Istio's SNI and ALPN for ISTIO_MUTUAL, the ServiceEntry's subjectAltNames when the rule
// names none, auto SNI and SAN validation where istiod sets them.
// Each subset is a cluster whose endpoints carry all its labels.
//
// VirtualService: each http route becomes one Envoy route per match block (uri exact, prefix,
// regex; headers and withoutHeaders; method, scheme and authority as pseudo-headers; query
// parameters; ignoreUriCase; port and gateways select where a block applies). Destinations
// become a cluster, or weighted clusters; a destination without a port takes its host's only
// port, else the port being routed. Timeout sets the route timeout and max_stream_duration
// (what grpc-go reads); without one the timeout is 0 (none), as Istio sets it. Retries map to
// a retry policy (HTTP codes in retryOn become retriable status codes); without retries,
// Istio's default policy applies; attempts 0 turns retries off. Rewrite (uri as a prefix
// rewrite, uriRegexRewrite, authority), redirect, directResponse, request and response header
// changes (per route and per weighted destination), fault injection (fixed delay; abort by
// HTTP or gRPC status; a fault without a percentage applies to no request, as Istio
// documents) and mirroring are translated. Istio has no grpc section: http routes serve gRPC.
// A host without a VirtualService gets one route to its own cluster. A host with several
// VirtualServices takes the oldest (then first by name); an exact host wins over a wildcard.
//
// Gateway: a gateway proxy gets the Gateways whose selector its labels satisfy (node metadata
// LABELS; an empty selector selects every gateway proxy), merged as istiod merges them
// (mergeGateways), oldest Gateway first: plaintext HTTP, HTTP2 and GRPC servers on a port share
// one listener and route configuration; HTTPS servers (SIMPLE, MUTUAL, ISTIO_MUTUAL) and TLS
// PASSTHROUGH servers share a port as filter chains matched by SNI; a server that would mix the
// two on a port, or repeat a TLS host of the port, is left out with a fault of its Gateway
// naming the port, the server it conflicts with and the class. Classes are built while a
// gateway proxy of theirs is connected (Controller.AcquireGatewayClass, which the xDS server
// calls), and kept for a grace period after the last one goes. A VirtualService bound to the
// gateway (gateways: "name" in its namespace, or "namespace/name") gets a virtual host for
// each of its hosts that a server host admits ("namespace/host" patterns), named by the
// narrower of the two; VirtualServices with the same host on a port have their routes joined,
// oldest first. tls.httpsRedirect requires TLS on the virtual host. An HTTPS server's
// certificates are named for the proxy's own agent to serve by SDS (cluster sds-grpc), as
// istiod names them: credentialName "kubernetes://NAME" (and "-cacert" for MUTUAL), files
// "file-cert:CERT~KEY" and "file-root:CA", ISTIO_MUTUAL "default" and "ROOTCA"; the bridge
// serves no secret. A PASSTHROUGH server routes each SNI host of its VirtualServices' tls
// routes to a TCP proxy of the route's destinations.
//
// # Faults
//
// A fault is reported against its resource (Faults, and a warning in the log when it appears)
// and only what it affects is left out; it never stops the rest of the mesh from being served:
//
//   - A destination that cannot be resolved (no ServiceEntry for its host, no such port, a
//     subset its host's DestinationRule does not define) is left out; the route's other
//     destinations keep their relative weights, so a canary whose subset is missing sends all
//     traffic to what exists rather than failing a share of it. A route left with no
//     destination is left out, and requests fall through to the next route.
//   - A match block that cannot be matched as written (a regular expression that does not
//     compile, sourceLabels or sourceNamespace) is left out, never widened.
//   - A route whose action cannot be translated (an invalid regex rewrite, a fault of which
//     nothing translates, a delegate) is left out.
//   - An endpoint that is not an IP address under STATIC or NONE is left out.
//   - A host defined by several ServiceEntries is taken from the oldest; a host with several
//     DestinationRules or VirtualServices likewise; the others are reported.
//   - Every output is validated with the Envoy types' ValidateAll; one that fails is not
//     served, and reported against the resource it derives from.
//
// # Left out
//
// Not translated, and reported as faults where a resource asks for them: the secrets of
// credentialName (the bridge serves none; istiod also leaves a sidecar's TLS out for a rule
// without workloadSelector, which a shared configuration cannot), SIMPLE and MUTUAL TLS for
// proxyless clients (as istiod's gRPC generator), proxyProtocol, tunnel, the deprecated
// outlierDetection.consecutiveErrors (istiod ignores it), Gateway TCP servers, TLS servers that terminate (only PASSTHROUGH is
// translated) and AUTO_PASSTHROUGH, TCP routes, TLS routes outside Gateways' passthrough
// servers, sourceLabels and sourceNamespace matches (a
// shared configuration has no client identity), delegate VirtualServices, corsPolicy,
// PASSTHROUGH load balancing, DYNAMIC_DNS, locality load balancing settings, and
// retryRemoteLocalities. Silently not modelled, being per proxy or per mesh: auto mTLS
// (istiod's transport socket matches for MESH_INTERNAL services, from PeerAuthentication),
// the DNS lookup family of dual-stack or IPv6 proxies, a gateway's clusters without
// use_downstream_protocol for sniffed ports (the clusters are shared: they take a sidecar's),
// WorkloadEntries' service accounts as subjectAltNames (they need the trust domain), cluster
// metadata, and ISTIO_MUTUAL for xDS v2 gRPC clients (the certificate provider fields are
// newer than v2). Silently not modelled: a redirect's derivePort, exportTo (every
// resource is visible everywhere), Sidecar resources,
// the namespace-dependent choice of DestinationRule, short-name and VIP domains on virtual
// hosts, and Istio's per-proxy views (every client is served every resource). grpc-go itself
// accepts only EDS, LOGICAL_DNS and aggregate clusters and the ROUND_ROBIN, LEAST_REQUEST and
// RING_HASH policies: a proxyless client cannot reach a DNS (STRICT_DNS) service, nor one
// whose rule asks for RANDOM or Maglev.
package envoy
