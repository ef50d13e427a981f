package freeport

import (
	"net"
	"testing"
)

// TestAddrsAreDistinctAndFree: the addresses differ from one another and can be bound once
// returned.
func TestAddrsAreDistinctAndFree(t *testing.T) {
	for range 50 {
		addrs := Addrs(t, 4)
		seen := map[string]bool{}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s handed out twice: %v", a, addrs)
			}
			seen[a] = true
		}
		for _, a := range addrs {
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("%s is not free: %v", a, err)
			}
			l.Close()
		}
	}
}
