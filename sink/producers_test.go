package sink

import (
	"fmt"
	"testing"
)

// Producers that went away are remembered for operators, but not without end.
func TestProducersForgetTheOldestDisconnected(t *testing.T) {
	var p producers
	p.open("producer:live", "10.0.0.1:1")
	for i := range maxDisconnected + 10 {
		owner := fmt.Sprintf("ip:10.1.%d.%d", i/256, i%256)
		p.open(owner, owner+":1")
		p.close(owner)
	}
	list := p.list()
	if len(list) != maxDisconnected+1 {
		t.Fatalf("%d producers remembered, want %d disconnected and the connected one", len(list), maxDisconnected)
	}
	seen := map[string]bool{}
	for _, pi := range list {
		seen[pi.Owner] = true
	}
	if !seen["producer:live"] || seen["ip:10.1.0.0"] || !seen[fmt.Sprintf("ip:10.1.%d.%d", (maxDisconnected+9)/256, (maxDisconnected+9)%256)] {
		t.Fatal("kept the wrong ones: the connected producer and the most recent disconnected ones must stay")
	}
}
