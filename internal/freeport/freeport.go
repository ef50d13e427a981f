// Package freeport gives tests loopback addresses to hand to a process they start.
package freeport

import (
	"net"
	"testing"
)

// Addrs returns n loopback addresses whose ports are free now and differ from one another:
// every listener stays open until all n are chosen, so the kernel cannot hand one port out
// twice (two listeners opened and closed one after the other may get the same port, and the
// process given both then fails to bind the second). Another process may still take a port
// before its user binds it; on a test machine that is rare.
func Addrs(t testing.TB, n int) []string {
	t.Helper()
	out := make([]string, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("no free loopback port: %v", err)
		}
		ls = append(ls, l)
		out[i] = l.Addr().String()
	}
	return out
}
