package mcpv1alpha1

// TriggerCollection is the collection of the Resources message with which an MCP source that
// dials a ResourceSink opens the stream, so that the sink starts sending its requests. Istio's
// source clients do the same; a sink NACKs it (Unimplemented) and goes on. Written by hand
// beside the generated code: it is part of the protocol as Istio speaks it, not of mcp.proto.
const TriggerCollection = "$triggerCollection"
