package etcdbackend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The layout under the prefix P (store.etcd.prefix). Owners and collections are path-escaped,
// so that the '/' in "istio/networking/v1alpha3/serviceentries" or in a SPIFFE ID does not
// split a key; a resource name is the key's tail as it is.
//
//	P r/OWNER/COLLECTION/NAME   a resource an owner holds: the store's encoding of it,
//	                            attached to the owner's lease when the owner expires
//	P s/OWNER                   the owner's sequence: every commit of the owner puts it and
//	                            compares its mod revision, so writes of one owner from two
//	                            replicas cannot interleave
//	P l/OWNER                   the owner's lease ID, attached to that lease
//	P p/OWNER/REPLICA           the owner has a stream on REPLICA; attached to the replica's
//	                            session lease, so a dead replica's streams end by themselves
//	P t/OWNER/TXID/SEQ          a chunk of a write too large for one etcd transaction; TXID
//	                            begins with the writer's session lease (hex)
//	P c/OWNER/TXID              the commit record of such a write: its chunks are applied,
//	                            as one write, when it appears; later copied to r/ keys
//	                            (materialized) and deleted with its chunks
//	P a/REPLICA                 the replica is alive: attached to its session lease. A
//	                            commit record is written only while the lease its chunks
//	                            name is this key's, so the chunks of a dead session that
//	                            have no record can never get one, and are collected (gc.go)
const (
	resourcePrefix = "r/"
	sequencePrefix = "s/"
	leasePrefix    = "l/"
	presencePrefix = "p/"
	chunkPrefix    = "t/"
	commitPrefix   = "c/"
	alivePrefix    = "a/"
)

func esc(s string) string { return url.PathEscape(s) }

func unesc(s string) (string, error) { return url.PathUnescape(s) }

func resourceKey(owner, collection, name string) string {
	return resourcePrefix + esc(owner) + "/" + esc(collection) + "/" + name
}

func sequenceKey(owner string) string { return sequencePrefix + esc(owner) }
func leaseKey(owner string) string    { return leasePrefix + esc(owner) }
func presenceKey(owner, replica string) string {
	return presencePrefix + esc(owner) + "/" + esc(replica)
}
func chunkKey(owner, txid string, seq int) string {
	return fmt.Sprintf("%s%s/%s/%06d", chunkPrefix, esc(owner), txid, seq)
}
func chunksPrefix(owner, txid string) string { return chunkPrefix + esc(owner) + "/" + txid + "/" }
func aliveKey(replica string) string         { return alivePrefix + esc(replica) }
func commitKey(owner, txid string) string    { return commitPrefix + esc(owner) + "/" + txid }
func ownerCommitsPrefix(owner string) string { return commitPrefix + esc(owner) + "/" }

// resourceOf parses a relative r/ key.
func resourceOf(rel string) (owner, collection, name string, err error) {
	rest, ok := strings.CutPrefix(rel, resourcePrefix)
	if !ok {
		return "", "", "", fmt.Errorf("not a resource key: %q", rel)
	}
	o, rest, ok1 := strings.Cut(rest, "/")
	c, n, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || o == "" || c == "" || n == "" {
		return "", "", "", fmt.Errorf("malformed resource key %q", rel)
	}
	if owner, err = unesc(o); err != nil {
		return "", "", "", fmt.Errorf("resource key %q: owner: %w", rel, err)
	}
	if collection, err = unesc(c); err != nil {
		return "", "", "", fmt.Errorf("resource key %q: collection: %w", rel, err)
	}
	return owner, collection, n, nil
}

// pairOf parses a relative key of the form PREFIX A/B (presence, commit records).
func pairOf(rel, prefix string) (a, b string, err error) {
	rest, _ := strings.CutPrefix(rel, prefix)
	x, y, ok := strings.Cut(rest, "/")
	if !ok || x == "" || y == "" {
		return "", "", fmt.Errorf("malformed key %q", rel)
	}
	if a, err = unesc(x); err != nil {
		return "", "", fmt.Errorf("key %q: %w", rel, err)
	}
	if b, err = unesc(y); err != nil {
		return "", "", fmt.Errorf("key %q: %w", rel, err)
	}
	return a, b, nil
}

// chunkOf parses a relative t/ key.
func chunkOf(rel string) (owner, txid string, err error) {
	rest, _ := strings.CutPrefix(rel, chunkPrefix)
	o, rest, ok1 := strings.Cut(rest, "/")
	txid, _, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || o == "" || txid == "" {
		return "", "", fmt.Errorf("malformed chunk key %q", rel)
	}
	if owner, err = unesc(o); err != nil {
		return "", "", fmt.Errorf("chunk key %q: %w", rel, err)
	}
	return owner, txid, nil
}

// txidLease is the writer's session lease a transaction ID begins with (0: none).
func txidLease(txid string) clientv3.LeaseID {
	hexLease, _, _ := strings.Cut(txid, "-")
	n, err := strconv.ParseInt(hexLease, 16, 64)
	if err != nil {
		return 0
	}
	return clientv3.LeaseID(n)
}

// op is one change of a write: a put of a relative r/ key, or its deletion.
type op struct {
	del   bool
	key   string
	value []byte
}

const (
	opPut byte = 1
	opDel byte = 2
)

// appendOp encodes an op into a chunk: kind, key length, key, and for a put value length and
// value (lengths as uvarints).
func appendOp(b []byte, o op) []byte {
	kind := opPut
	if o.del {
		kind = opDel
	}
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(o.key)))
	b = append(b, o.key...)
	if !o.del {
		b = binary.AppendUvarint(b, uint64(len(o.value)))
		b = append(b, o.value...)
	}
	return b
}

func opSize(o op) int {
	return 1 + 2*binary.MaxVarintLen64 + len(o.key) + len(o.value)
}

var errTruncated = errors.New("chunk truncated")

// decodeChunk reads a chunk's ops. A chunk is written by a replica of this bridge, but it is
// read from etcd, which anyone with access could write: a malformed one is an error, never a
// panic.
func decodeChunk(b []byte) ([]op, error) {
	var out []op
	for len(b) > 0 {
		kind := b[0]
		b = b[1:]
		if kind != opPut && kind != opDel {
			return nil, fmt.Errorf("chunk: unknown op kind %d", kind)
		}
		key, rest, err := readBytes(b)
		if err != nil {
			return nil, err
		}
		b = rest
		o := op{del: kind == opDel, key: string(key)}
		if !o.del {
			if o.value, b, err = readBytes(b); err != nil {
				return nil, err
			}
		}
		if _, _, _, err := resourceOf(o.key); err != nil {
			return nil, fmt.Errorf("chunk: %w", err)
		}
		out = append(out, o)
	}
	return out, nil
}

func readBytes(b []byte) (field, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, errTruncated
	}
	return b[w : w+int(n)], b[w+int(n):], nil
}
