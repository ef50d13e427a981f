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
//     "HOST:PORT", as istiod builds it for a proxyless gRPC client (domains.go): its domains
//     are HOST, "HOST.", for a NAME.NAMESPACE.svc.SUFFIX host NAME.NAMESPACE and
//     NAME.NAMESPACE.svc, and the ServiceEntry's address, each also with ":PORT".
//   - API listener, for proxyless gRPC clients dialling xds:///HOST:PORT: HOST:PORT, on the
//     ServiceEntry's address (0.0.0.0 without one) and the port, as grpcgen sets it, with an
//     HttpConnectionManager with RDS (ADS) of outbound|PORT||HOST and grpcgen's fault and
//     router filters. Envoy's connection managers (sidecars' and gateways') have istiod's
//     fault, CORS and router filters, whether or not a route uses them. The API listeners,
//     the host route configurations and the proxyless clusters are built only for the hosts
//     connected clients ask for (grpccluster.go), as istiod builds a proxyless client's
//     configuration when it connects.
//   - Outbound listener of a port, for Envoy sidecars: 0.0.0.0_PORT, istiod's (below: not
//     bound, behind virtualOutbound), its HTTP chain with RDS of the route configuration PORT ("9080"), which
//     holds every HTTP host's virtual host on that port, as istiod builds it for a sidecar: the
//     same domains without ports, with ignore_port_in_host_matching, validate_clusters false
//     and max_direct_response_body_size_bytes 1 MiB (as on gateway route configurations). An
//     address two hosts share on a port goes to the first by name (the other is reported):
//     Envoy rejects a domain twice.
//   - VHDS (vhds.go), for the clients that take virtual hosts on demand: a port's route
//     configuration without virtual hosts and with vhds over ADS, stored as PORT@vhds and
//     served to them as PORT, and each virtual host of it as a VirtualHost PORT/VHOST, named
//     so itself, built by its host's unit.
//   - Outbound listeners of non-HTTP ports (tcplisteners.go), istiod's: VIP_PORT
//     ("10.96.0.20_27017") for a host with an address, on VIP:PORT with bind_to_port false;
//     ENDPOINT_PORT likewise for each endpoint of a NONE host without an address; the hosts
//     without an address (or with a CIDR) share 0.0.0.0_PORT with the port's HTTP hosts if it
//     has any.
//   - istiod's sidecar plumbing for iptables capture (sidecar.go), the same for every sidecar
//     and served to sidecar nodes alone (source/xds ListenerView): virtualOutbound
//     (0.0.0.0:15001, use_original_dst) hands each captured connection to the listener of its
//     original destination, none of which binds (bind_to_port false); what no listener takes
//     goes to PassthroughCluster (ORIGINAL_DST) under outboundTrafficPolicy ALLOW_ANY,
//     istiod's default, or BlackHoleCluster (STATIC, no endpoints) under REGISTRY_ONLY
//     (translate.outbound_traffic_policy), and so does what no chain of an outbound listener
//     matches, by istiod's PassthroughFilterChain default. Every 0.0.0.0_PORT is istiod's
//     shape, an HTTP-only one too: the HTTP inspector, the HTTP chain matched by raw_buffer and
//     http/1.1 or h2c, a 15s transport_socket_connect_timeout. virtualInbound (0.0.0.0:15006,
//     the original_dst listener filter) has only istiod's passthrough chains that no workload
//     changes: 15006 itself to BlackHoleCluster, plaintext HTTP through a connection manager
//     whose one route goes to InboundPassthroughCluster (the original destination from
//     127.0.0.6), other plaintext and TLS through a tcp_proxy to it. A client without capture
//     reaches none of the outbound listeners: the bridge's sidecar configuration assumes
//     capture, as istiod's does.
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
// ServiceEntry: one cluster per host and port. STATIC is an EDS cluster (ADS config source)
// with a load assignment of the inline endpoints and of the WorkloadEntries of the same
// namespace that the workloadSelector selects. NONE is istiod's original-destination cluster
// for sidecars (ORIGINAL_DST, CLUSTER_PROVIDED: Envoy connects where the client dialled) and
// the EDS cluster for gateways, which cannot use one (their overlay of the clusters); a
// DestinationRule's loadBalancer PASSTHROUGH makes any host's Envoy clusters
// original-destination ones (without endpoints; a DNS host's DNS settings stay, as istiod's
// do). DNS is STRICT_DNS and DNS_ROUND_ROBIN is
// LOGICAL_DNS (its first endpoint only), with the load assignment inline, and the host itself
// as the endpoint when none is listed. An endpoint's port is its own port of the service port's
// name, else the service port's targetPort, else its number. Endpoints are grouped by locality
// ("region/zone/subzone"); a locality's weight is the sum of its endpoints' weights (at least 1:
// grpc-go ignores a locality without one). Endpoints carry no metadata: istiod sends neither
// their labels nor their network (its endpoint metadata is telemetry's and auto mTLS's, below).
// An address:port listed twice is kept once (grpc-go rejects duplicates).
// Ports whose protocol is not HTTP-based (TCP, TLS, HTTPS, MONGO, MYSQL, REDIS) get no routes
// but outbound listeners (below); UDP and HBONE get neither. A port's protocol is its
// protocol field alone, as istiod reads a ServiceEntry's (not its name); unset or unknown is
// protocol sniffing, whose cluster uses the downstream protocol, and which has both paths, as
// istiod's sniffed ports (tcplisteners.go buildSniffedPort): it is listened for where a TCP
// port would be, its tcp routes' chains (else its own TCP proxy) beside an HTTP chain matched
// by the plaintext protocols the HTTP inspector detects. On 0.0.0.0_PORT (no address) the HTTP
// chain is the port's shared one and the TCP proxy that matches everything the listener's
// default chain (the first sniffed host's; the others are reported); on an address of its own
// (VIP_PORT, or a NONE host's endpoint addresses) the HTTP chain's route configuration is the
// host's, "HOST:PORT", its virtual host alone with the domain "*", and the host makes no
// 0.0.0.0_PORT (the port's route configuration, where one is built, still lists it, as istiod's).
//
// Non-HTTP ports, as istiod's buildSidecarOutboundListener and its TLS and TCP filter chain
// options: a host's address is its ServiceEntry's first address (a /32 is an IP; istiod keeps
// one service per host name on a sidecar, the others are reported). A TLS or HTTPS port takes
// the tls routes of every mesh VirtualService whose hosts cover the host (oldest first), a
// chain per match (its sniHosts as server_names, sorted; its destinationSubnets, else the
// host's CIDR, as prefix_ranges; a runtime match once), else a chain to the host's own cluster,
// matched by the host name when the listener is shared. A TCP, MONGO, MYSQL or REDIS port takes
// the tcp routes likewise, up to the first that matches any destination (no match, or a match
// without destinationSubnets); a route's subnet matches make one chain; else the host's own
// chain, matching everything. Matches apply by port and gateways ("mesh"). A chain ends in a
// tcp_proxy: to one cluster (stat_prefix the cluster), or weighted clusters of the
// destinations of weight above 0 (stat_prefix NAME.NAMESPACE of the VirtualService), with the
// first destination's DestinationRule's top-level tcp idleTimeout (else Envoy's default, 1h)
// and maxConnectionDuration, a source-IP hash when its consistentHash (or the subset's) uses
// the source IP, and its tunnel (the subset's for a subset); MONGO puts mongo_proxy first
// (istiod's PILOT_ENABLE_MONGO_FILTER is on by default; its MySQL and Redis filters are off by
// default and not built). Chains carry istiod's "istio" config metadata and a 15s
// transport_socket_connect_timeout; a listener with SNI chains has the TLS inspector (512
// bytes), one with an HTTP chain the HTTP inspector; listener_filters_timeout is 0 and
// continue_on_listener_filters_timeout set. Hosts join a listener oldest ServiceEntry first
// (then by host), istiod's service order: a chain whose match the listener has already is left
// out, and so is a MONGO or MYSQL port beside another protocol (isConflictWithWellKnownPort),
// each with a fault of the ServiceEntry. On a 0.0.0.0_PORT shared with HTTP hosts, their
// connection manager's chain matches application_protocols http/1.1 and h2c over raw_buffer,
// first; a chain matching everything is the listener's default_filter_chain when it has others.
//
// Clusters are built as istiod builds them (buildCluster, applyTrafficPolicy): alt_stat_name
// "NAME;", a common_lb_config with healthy_panic_threshold 0% (panic mode off; outlier
// detection's minHealthPercent sets it), EDS over ADS without an initial fetch timeout; DNS
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
// ADS for gateway proxies alone (their overlay of the clusters, translate.GatewayCollection:
// sidecars get such a cluster without TLS, as istiod's for a rule without workloadSelector),
// Istio's SNI and ALPN for ISTIO_MUTUAL, the ServiceEntry's subjectAltNames when the rule
// names none, auto SNI and SAN validation where istiod sets them.
// Each subset is a cluster of the endpoints that carry all its labels.
//
// VirtualService: each http route becomes one Envoy route per match block, as istiod builds it
// (route.TranslateRoute): uri exact, prefix, regex; headers and withoutHeaders (ordered by
// name; a withoutHeaders value condition treats a missing header as empty, so a request
// without the header matches); method, authority and scheme as pseudo-headers; the regex "*"
// and an empty StringMatch as presence; query parameters; case_sensitive unless
// ignoreUriCase; port and gateways select where a block applies; nothing after a catch-all
// route. Each route has istiod's decorator operation ("HOST:PORT/PATH" of its only cluster,
// else "VIRTUALSERVICE:PORT/PATH"). One destination is a cluster, several weighted clusters
// (weight 0 left out); a destination without a port takes its host's only port, else the port
// being routed; each destination's consistent hash is a hash policy. Timeout (0, none, when
// unset) is the route timeout and, for Envoy, max_grpc_timeout; proxyless gRPC clients get it
// as max_stream_duration instead (their own virtual host, below). Retries follow istiod's
// retry.ConvertPolicy: without retries, two on connect-failure, refused-stream, unavailable
// and cancelled (retriable-status-codes with none: no HTTP response is retried), on another
// host unless the route's only destination hashes consistently; retryOn's HTTP codes become
// retriable status codes; attempts 0 turns retries off; retryRemoteLocalities is
// previous_priorities. Rewrite (uri as a prefix rewrite, uriRegexRewrite, authority),
// redirect, directResponse, request and response header changes (per route and per weighted
// destination; Host or :authority set on requests rewrites the host), fault injection (fixed
// delay; abort by HTTP or gRPC status; a fault without a percentage applies to no request, as
// Istio documents), mirroring (100% by default, 0% none, the Host kept without "-shadow",
// trace not sampled) and corsPolicy (the CORS filter's per-route configuration; Envoy
// connection managers have the filter, CORSFilter; proxyless clients, which lack it, get
// neither) are translated. Delegate VirtualServices (without hosts) are merged into their root
// as istiod merges them (delegate.go). Istio has no grpc section: http routes serve gRPC. A
// host without a VirtualService gets istiod's default route to its own cluster. A host with
// several VirtualServices takes the oldest (then first by name); an exact host wins over a
// wildcard. A gateway's virtual hosts answer to their host alone, their joined routes with
// catch-all routes last.
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
// oldest first. tls.httpsRedirect requires TLS on the virtual host. An HTTPS server (SIMPLE,
// MUTUAL, OPTIONAL_MUTUAL, ISTIO_MUTUAL) has istiod's TLS context (BuildListenerTLSContext,
// gatewaytls.go): credentialName (or credentialNames) "kubernetes://NAME" and its CA
// "NAME-cacert" (or caCertCredentialName) over ADS, as istiod serves them (the bridge serves
// no secret: each is a fault of its Gateway); files "file-cert:CERT~KEY" (or tlsCertificates)
// and "file-root:CA", and ISTIO_MUTUAL's "default" and "ROOTCA", from the proxy's own agent
// (sds-grpc); subjectAltNames, certificate pins, caCrl and insecureSkipVerify where istiod
// puts them; TLS parameters only for the versions and cipher suites a server sets. Gateway
// listeners are istiod's: OUTBOUND, one connection accepted per socket event, chains without
// names and with a 15s transport socket connect timeout, the TLS inspector (512 bytes) where
// chains are chosen by SNI. A PASSTHROUGH server routes each SNI host of its VirtualServices'
// tls routes to a TCP proxy of the route's destinations.
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
//     nothing translates, a delegate that is missing, not exported to the root's namespace or
//     has hosts, a delegate's route whose matches conflict with the root's) is left out.
//   - An endpoint that is not an IP address under STATIC or NONE is left out.
//   - A host defined by several ServiceEntries is taken from the oldest; a host with several
//     DestinationRules or VirtualServices likewise; the others are reported.
//   - Every output is validated with the Envoy types' ValidateAll; one that fails is not
//     served, and reported against the resource it derives from.
//
// # Left out
//
// Not translated, and reported as faults where a resource asks for them: the secrets of
// credentialName (the bridge serves none), SIMPLE and MUTUAL TLS for
// proxyless clients (as istiod's gRPC generator), proxyProtocol, tunnel, the deprecated
// outlierDetection.consecutiveErrors (istiod ignores it), Gateway TCP servers (and with them
// tcp routes bound to Gateways), TLS servers that terminate (only PASSTHROUGH is translated)
// and AUTO_PASSTHROUGH, sourceLabels and sourceNamespace matches (a shared configuration has
// no client identity), DYNAMIC_DNS, locality load balancing settings.
//
// Nothing is left out silently (untranslated.go): every field of an input that the
// translation neither reads nor reports a fault of its own for is a fault of its resource,
// "not translated, served without them: FIELD (why), ...": among them DestinationRule
// exportTo other than "*" and workloadSelector (scopes are by namespace, narrowed by
// ServiceEntries' and VirtualServices' exportTo and Sidecars: scope.go; a VirtualService's
// exportTo is a fault of its own for tcp and tls routes and for gateways), Sidecar
// workloadSelector (such a Sidecar is not applied), ingress and outboundTrafficPolicy, and
// egress listeners with a port, a redirect's derivePort and prefixRewrite, a match's
// statPrefix, Gateway servers' bind, the identities of workloads
// (WorkloadEntry serviceAccount: as subjectAltNames they need the trust domain), and any
// field this bridge's Istio API does not know, by number. EnvoyFilter resources are read
// only to report each as not applied. Not reported, as it leaves the Envoy
// configuration as istiod builds it apart from automatic mutual TLS and telemetry, which the
// bridge does not do: a ServiceEntry's location. Still silent, as they follow from one
// configuration for every client or need what a standalone bridge has not: auto mTLS
// (istiod's transport socket matches for MESH_INTERNAL services, from PeerAuthentication,
// and the envoy.transport_socket_match metadata of endpoints labelled
// security.istio.io/tlsMode=istio or with a serviceAccount, which they select by),
// endpoints' telemetry metadata (istio "workload": name, namespace, canonical service and
// revision, cluster ID),
// the DNS lookup family of dual-stack or IPv6 proxies, a gateway's clusters without
// use_downstream_protocol for sniffed ports (the clusters are shared: they take a
// sidecar's), cluster and route metadata, ISTIO_MUTUAL for xDS v2 gRPC clients (the
// certificate provider fields are newer than v2), the namespace-dependent choice of
// DestinationRule (a rule in the proxy's own namespace first) and the VirtualServices and
// DestinationRules a Sidecar's egress hosts import by namespace; and istiod's plumbing the
// bridge does not emit: the catch-all virtual host of a
// sidecar's route configurations ("allow_any", to PassthroughCluster), virtualInbound's chains
// of the proxy's own inbound ports and the inbound|PORT|| clusters (they need the proxy's own
// workload and the Services that select it, which a configuration every sidecar shares cannot
// know) and its chains that terminate Istio mTLS (PeerAuthentication; the bridge's clients
// originate none), the HTTP proxy listener, istiod's telemetry filters on the plumbing
// (istio.metadata_exchange), ALLOW_ANY_DYNAMIC_DNS and an egress proxy for unknown
// destinations, dual-stack and IPv6 wildcards and TPROXY interception (istiod's choices by the
// proxy's IP mode and interception mode; the plumbing is IPv4 REDIRECT's), telemetry and
// access log filters, the skipping of
// the proxy's own endpoint address, and addresses istiod allocates for ServiceEntries
// without any (DNS capture). grpc-go itself
// accepts only EDS, LOGICAL_DNS and aggregate clusters and the ROUND_ROBIN, LEAST_REQUEST and
// RING_HASH policies: a proxyless client cannot reach a DNS (STRICT_DNS) service, nor one
// whose rule asks for RANDOM or Maglev.
package envoy
