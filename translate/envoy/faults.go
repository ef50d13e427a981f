package envoy

import (
	"cmp"
	"fmt"
	"slices"
)

// Fault is a fault found while translating one Istio resource: a VirtualService that routes to
// an unknown host, a subset that is not defined, a regular expression that does not compile.
// A fault never stops the translation of anything else; what the fault affects is left out
// (the message says what), and everything else is served.
type Fault struct {
	Kind    string `json:"kind"`    // the Istio kind: "VirtualService"
	Name    string `json:"name"`    // the resource: "namespace/name"
	Message string `json:"message"` // the field at fault, the fault, and what was left out
}

func (f Fault) String() string { return f.Kind + " " + f.Name + ": " + f.Message }

// faults collects the faults of one translation unit.
type faults []Fault

func (fs *faults) add(kind, name, format string, args ...any) {
	*fs = append(*fs, Fault{Kind: kind, Name: name, Message: fmt.Sprintf(format, args...)})
}

// sortFaults sorts by kind, name and message and drops duplicates: a VirtualService that
// applies to several hosts and ports reports the same fault from each.
func sortFaults(fs []Fault) []Fault {
	slices.SortFunc(fs, compareFaults)
	return slices.Compact(fs)
}

func compareFaults(a, b Fault) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Message, b.Message))
}
