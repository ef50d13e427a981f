package envoy

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
)

var firstLoadN = flag.Int("firstload.n", 100000, "BenchmarkTranslateFirstLoad: ServiceEntries in the mesh")

// BenchmarkTranslateFirstLoad is the translation of a full load alone, as make bench-scale's
// mesh has it (-firstload.n ServiceEntries of one HTTP host, port 8080, and three endpoints
// each; the ports' route configurations built when asked, as the bridge does): reading the
// inputs into a new translator, then translating them, without the store, the file source
// or clients, whose share of the machine moves the black-box figures by more than most
// changes to the translation. It reports each step's time.
func BenchmarkTranslateFirstLoad(b *testing.B) {
	n := *firstLoadN
	in := make([]Input, n)
	for i := range in {
		in[i] = InputOf(resource(kindServiceEntry, fmt.Sprintf("ns-%d/svc-%d", i%1000, i), &networking.ServiceEntry{
			Hosts:      []string{fmt.Sprintf("svc-%d.ns-%d.example", i, i%1000)},
			Ports:      []*networking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}},
			Resolution: networking.ServiceEntry_STATIC,
			Endpoints: []*networking.WorkloadEntry{
				{Address: fmt.Sprintf("10.%d.%d.1", i/65536%256, i/256%256), Labels: map[string]string{"app": "svc"}},
				{Address: fmt.Sprintf("10.%d.%d.2", i/65536%256, i/256%256), Labels: map[string]string{"app": "svc"}},
				{Address: fmt.Sprintf("10.%d.%d.3", i/65536%256, i/256%256), Labels: map[string]string{"app": "svc"}},
			},
		}))
		in[i].Checked = true // as the file source's entries are (store.Encoded.Checked)
	}
	var read, translate float64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		tr := NewTranslator(TranslatorOptions{LazyProxyless: true, LazyPortRoutes: true})
		b.StartTimer()
		start := time.Now()
		tr.Update(collectionOf(kindServiceEntry), in, nil)
		read += float64(time.Since(start))
		start = time.Now()
		delta, _ := tr.Translate()
		translate += float64(time.Since(start))
		if got := len(delta.Upserts[EndpointType]); got != n {
			b.Fatalf("%d load assignments, want %d", got, n)
		}
	}
	b.ReportMetric(read/float64(b.N)/1e6, "ms-read")
	b.ReportMetric(translate/float64(b.N)/1e6, "ms-translate")
}
