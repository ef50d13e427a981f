// Package xdsv2 is the end-to-end test of mcpbridge's xDS v2 transport with a real old client:
// grpc-go 1.34's xDS resolver and balancers, which speak v2 to a server that does not announce
// "xds_v3", against a real bridge process over loopback. It is a module of its own, so that
// grpc-go 1.34 and the go-control-plane v0.9 it needs stay out of the bridge's go.mod.
// v2descriptors, a module of its own again (go-control-plane v0.9.7, Envoy 1.16's API), dumps
// the descriptors the main module's carry-over test reads (translate/envoy,
// TestV3BodiesReadAsV2).
package xdsv2
