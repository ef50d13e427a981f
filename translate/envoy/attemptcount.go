package envoy

// includeRequestAttemptCount is istiod's include_request_attempt_count on every virtual host
// it builds, for sidecars, gateways and proxyless gRPC clients alike (util.GetProxyHeaders:
// ProxyConfig proxyHeaders.attemptCount is enabled unless disabled): Envoy sends the
// x-envoy-attempt-count header upstream. The bridge has no ProxyConfig, so it is always on.
const includeRequestAttemptCount = true
