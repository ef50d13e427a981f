package source

import (
	"hash/maphash"
	"iter"
	"slices"
)

// nameSet is a set of names kept by a 64-bit hash of each (maphash, seeded at random per
// process). An Envoy subscribes to the endpoints of every cluster by name, a million at that
// size, in batches as clusters arrive: a map by the names themselves rehashed each name's
// bytes at every growth, a cache miss apiece (0.7 s of a million names' subscription); a map
// by hash moves the hashes alone. A lookup costs what the map by name's did: one hash of the
// name (the same function Go's maps use) and one comparison.
//
// Two names may share a hash (by chance: the seed is secret, so a client cannot choose names
// that do); the second is kept in spill, with its key, checked only where the key's slot
// holds another name. A slot is 24 bytes, 8 more than the map by name's.
type nameSet struct {
	byHash map[uint64]string
	spill  map[string]uint64
}

// nameSeed seeds nameKey.
var nameSeed = maphash.MakeSeed()

// nameKey is the hash a nameSet keys a name by.
func nameKey(name string) uint64 { return maphash.String(nameSeed, name) }

// reserve makes room for n names when none are held.
func (s *nameSet) reserve(n int) {
	if s.byHash == nil {
		s.byHash = make(map[uint64]string, n)
	}
}

func (s *nameSet) len() int { return len(s.byHash) + len(s.spill) }

// has tells whether the set holds name, whose key is h.
func (s *nameSet) has(name string, h uint64) bool {
	if held, ok := s.byHash[h]; ok {
		if held == name {
			return true
		}
		_, ok = s.spill[name]
		return ok
	}
	return false // spill holds only names whose key byHash holds
}

// add adds name, whose key is h, and reports whether it was new.
func (s *nameSet) add(name string, h uint64) bool {
	if s.byHash == nil {
		s.byHash = map[uint64]string{}
	}
	held, ok := s.byHash[h]
	switch {
	case !ok:
		s.byHash[h] = name
		return true
	case held == name:
		return false
	}
	if _, had := s.spill[name]; had {
		return false
	}
	if s.spill == nil {
		s.spill = map[string]uint64{}
	}
	s.spill[name] = h
	return true
}

// remove removes name, whose key is h, and reports whether it was there. A spilled name of
// the same key takes the freed slot, so that spill only ever holds names byHash's keys cover.
func (s *nameSet) remove(name string, h uint64) bool {
	held, ok := s.byHash[h]
	if !ok {
		return false
	}
	if held != name {
		if _, had := s.spill[name]; !had {
			return false
		}
		delete(s.spill, name)
		return true
	}
	delete(s.byHash, h)
	for other, k := range s.spill {
		if k == h {
			delete(s.spill, other)
			s.byHash[h] = other
			break
		}
	}
	return true
}

// all yields every name, in no order.
func (s *nameSet) all() iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, n := range s.byHash {
			if !yield(n) {
				return
			}
		}
		for n := range s.spill {
			if !yield(n) {
				return
			}
		}
	}
}

// sorted is the names in order.
func (s *nameSet) sorted() []string {
	out := make([]string, 0, s.len())
	for n := range s.all() {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
