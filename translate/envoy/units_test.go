package envoy

import (
	"fmt"
	"maps"
	"reflect"
	"testing"
)

// TestUnitTableHoldsEachUnitByItsKey: a host's two units share an entry of the table and
// each is set, read and forgotten apart; other units by key; every unit is listed once, and
// the host names are those with a host unit.
func TestUnitTableHoldsEachUnitByItsKey(t *testing.T) {
	ut := newUnitTable()
	host, eps, port, other := &unitState{}, &unitState{}, &unitState{}, &unitState{}
	want := map[unitKey]*unitState{
		{unitHost, "a.example"}:      host,
		{unitEndpoints, "a.example"}: eps,
		{unitEndpoints, "b.example"}: other,
		{unitPort, "8080"}:           port,
	}
	for k, u := range want {
		ut.set(k, u)
	}
	check := func(step string) {
		t.Helper()
		got := maps.Collect(ut.all())
		if !maps.Equal(got, want) {
			t.Fatalf("%s: all = %v, want %v", step, got, want)
		}
		for k, u := range want {
			if ut.get(k) != u {
				t.Fatalf("%s: get(%v) = %p, want %p", step, k, ut.get(k), u)
			}
		}
		var hosts []string
		for h := range ut.hostNames() {
			hosts = append(hosts, h)
		}
		wantHosts := 0
		for k := range want {
			if k.kind == unitHost {
				wantHosts++
				if len(hosts) != 1 || hosts[0] != k.name {
					t.Fatalf("%s: host names %v, want [%s]", step, hosts, k.name)
				}
			}
		}
		if len(hosts) != wantHosts {
			t.Fatalf("%s: host names %v, want %d", step, hosts, wantHosts)
		}
	}
	check("set")
	if ut.get(unitKey{unitHost, "b.example"}) != nil || ut.get(unitKey{unitHost, "c.example"}) != nil {
		t.Fatal("a host unit never set reads as set")
	}
	ut.delete(unitKey{unitHost, "a.example"})
	delete(want, unitKey{unitHost, "a.example"})
	check("host unit deleted, its endpoints kept")
	ut.delete(unitKey{unitEndpoints, "a.example"})
	delete(want, unitKey{unitEndpoints, "a.example"})
	check("both deleted")
	if len(ut.hosts) != 1 {
		t.Fatalf("%d hosts held, want 1 (b.example's endpoints)", len(ut.hosts))
	}
	ut.reserveHosts(1000)
	check("after reserving room")
	ut.delete(unitKey{unitPort, "8080"})
	delete(want, unitKey{unitPort, "8080"})
	check("port unit deleted")
}

// TestUnitTableReservesRoomOnlyForALoadLargerThanItHolds: a table remade for every large
// change would copy the whole mesh each time; it is remade only for a load of more hosts
// than it holds (a first load).
func TestUnitTableReservesRoomOnlyForALoadLargerThanItHolds(t *testing.T) {
	ut := newUnitTable()
	for i := range 100 {
		ut.set(unitKey{unitHost, fmt.Sprintf("h%d.example", i)}, &unitState{})
	}
	held := reflect.ValueOf(ut.hosts).UnsafePointer()
	ut.reserveHosts(100)
	if reflect.ValueOf(ut.hosts).UnsafePointer() != held {
		t.Fatal("a change of as many hosts as the table holds remade it")
	}
	ut.reserveHosts(1000)
	if reflect.ValueOf(ut.hosts).UnsafePointer() == held || len(ut.hosts) != 100 {
		t.Fatalf("a load of more hosts than held: remade %v, %d hosts (want 100)", reflect.ValueOf(ut.hosts).UnsafePointer() != held, len(ut.hosts))
	}
}
