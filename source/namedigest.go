package source

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/dchest/siphash"
)

// namesDigest identifies a set of names, kept up to date as names come and go at a constant
// cost per name: streams asking for the same names share encoded responses (frameKey.names),
// and an Envoy's endpoint subscription holds a name per cluster of the mesh (a million at
// that size). Hashing the sorted set again after each change was a pass over every name at
// the next response: 120 ms at a million, in front of an edit's endpoints.
//
// It is the sum, modulo 2^128, of a keyed hash of each name (an additive multiset hash, as
// in Clarke et al., "Incremental Multiset Hash Functions", 2003), with the count. The hash is
// SipHash-2-4 with 128-bit output, a pseudorandom function of its key; the key is secret and
// new with each process, so no client can choose names whose hashes sum to those of another
// client's set: different sets share a digest only by chance. Digests are compared within
// the process only, never stored or shown.
type namesDigest struct {
	count  uint64
	lo, hi uint64
}

// namesDigestKey keys the names' hashes.
var namesDigestKey = func() (k [2]uint64) {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return [2]uint64{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}
}()

// nameHash is the keyed hash of one name.
func nameHash(name string) (lo, hi uint64) {
	// The hash only reads the bytes: no copy of the name.
	return siphash.Hash128(namesDigestKey[0], namesDigestKey[1], unsafe.Slice(unsafe.StringData(name), len(name)))
}

// addHash adds a name by its hash (nameHash).
func (d *namesDigest) addHash(lo, hi uint64) {
	var carry uint64
	d.lo, carry = bits.Add64(d.lo, lo, 0)
	d.hi, _ = bits.Add64(d.hi, hi, carry)
	d.count++
}

// removeHash removes a name by its hash (nameHash).
func (d *namesDigest) removeHash(lo, hi uint64) {
	var borrow uint64
	d.lo, borrow = bits.Sub64(d.lo, lo, 0)
	d.hi, _ = bits.Sub64(d.hi, hi, borrow)
	d.count--
}

// fingerprint is the digest as a key of shared responses, in the shape of frameKey.names:
// zero for no names, else the count and the sum hashed once more.
func (d *namesDigest) fingerprint() [sha256.Size]byte {
	if d.count == 0 {
		return [sha256.Size]byte{}
	}
	var buf [24]byte
	binary.LittleEndian.PutUint64(buf[:], d.count)
	binary.LittleEndian.PutUint64(buf[8:], d.lo)
	binary.LittleEndian.PutUint64(buf[16:], d.hi)
	return sha256.Sum256(buf[:])
}
