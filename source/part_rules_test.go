package source

import (
	"testing"

	mcpapi "istio.io/api/mcp/v1alpha1"

	"github.com/mcpbridge/mcpbridge/store"
)

// A later part of what a producer's return made owed leaves out a resource whose owner has
// left again (the client holds it; resent with its body it would be renewed), but not a name
// the client asked for anew, which it holds nothing of: that one goes, as a name asked anew
// does when nothing else is owed. (The random model found the client never sent such a name,
// its status SYNCED.)
func TestALaterPartSendsANameAskedAnewWhoseOwnerIsAway(t *testing.T) {
	const coll, name = "clusters", "c1"
	st := store.New(store.Options{})
	if _, err := st.Apply("p0", store.Update{Collection: coll, Resources: []*mcpapi.Resource{worldResource(name, 0, nil)}}); err != nil {
		t.Fatal(err)
	}
	v := st.View()
	e := v.Get(coll, name)
	away := gates{live: func() *liveness { return &liveness{key: "p0", dead: map[string][]string{"p0": {coll}}} }}
	for _, tc := range []struct {
		what             string
		asked, askedLate bool
		sent             bool
	}{
		{"a resource owed by the producer's return alone", false, false, false},
		{"a name asked anew", true, false, true},
		{"a name asked anew after the split", false, true, true},
	} {
		s := &subscription{}
		s.want.add(name)
		part := &pending{rev: v.Collection(coll).Revision, revive: true, all: true, continues: true}
		part.msg.Resources = []*store.Entry{e}
		if tc.asked {
			part.fresh = map[string]struct{}{name: {}}
		}
		if tc.askedLate {
			s.owed.addFresh(name)
		}
		s.Collection = coll
		s.owed.parts = []*pending{part}
		p := s.nextPart(v, away)
		if sent := len(p.msg.Resources) == 1; sent != tc.sent {
			t.Errorf("%s, its owner away: sent %v, want %v", tc.what, sent, tc.sent)
		}
	}
}
