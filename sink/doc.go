// Package sink is the bridge's MCP sink side: producers that push config to the bridge (the
// ResourceSink service) and remote sources the bridge subscribes to (Upstream, a client of
// their ResourceSource). Both directions turn each Resources message into one atomic write on
// the store and answer it with an ACK or a NACK, through the same code.
//
// # Applying a Resources message
//
// A Resources message is checked, then written with one store.Apply for its producer's owner
// ID, and only then acknowledged, so that anyone who reads the store after the ACK sees it. It
// is refused (a NACK with code InvalidArgument whose message names the collection, the
// resource and the fault) and nothing of it is written when its collection was not asked for,
// when it is incremental though the bridge asked that collection for full state, when it has
// no nonce, or when the store rejects it (a name empty or given twice, a body whose Any type
// is not the collection's kind or does not unmarshal). A full state (incremental: false)
// replaces what that producer holds in the collection; an incremental one upserts its
// resources and deletes its removed_resources.
//
// Alias collections (istio/networking/v1/serviceentries) are stored under their canonical
// collection, and "asked for" is decided after mapping to it, but the ACK or NACK names the
// collection as the producer did. A Resources for $triggerCollection, which Istio's MCP
// source clients send to open a ResourceSink stream, is answered with a NACK of code
// Unimplemented and the stream goes on.
//
// # Owner IDs
//
// Each producer's resources are stored under an owner ID, which is what lets a producer that
// reconnects find (and replace) its own resources, and what the store's conflict rule sorts
// by (the owner whose ID sorts first is served). The IDs are:
//
//   - "producer:" + the value of the gRPC metadata key mcp-producer-id, when the producer
//     sends one. The value is self-declared: any producer that sends it is that producer.
//   - the SPIFFE ID ("spiffe://trust-domain/path") from the first spiffe URI SAN of the
//     producer's TLS client certificate, when it has one and sends no mcp-producer-id.
//   - "ip:" + the producer's IP address without the port ("ip:10.0.0.7", "ip:::1"), otherwise.
//     IPv4-mapped IPv6 addresses are written as IPv4, so a dual-stack listener gives the same ID.
//   - "upstream:" + the dialled address, for everything an Upstream receives.
//
// Several streams that resolve to one ID are one owner: a full state on any of them replaces
// that owner's set in the collection.
//
// # Disconnects and expiry
//
// A producer's last good state stays served after its streams end. Its next full state
// replaces it. With Options.Expiry set, a producer that has had no open stream for that long
// has its resources deleted; a stream that opens before then cancels the deletion.
package sink
