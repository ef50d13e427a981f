package scale

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpapi "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	"github.com/mcpbridge/mcpbridge/translate/envoy"
)

// bigServiceEntry is a ServiceEntry of about 2 KiB: ten endpoints with three labels each.
func bigServiceEntry(i, gen int) *networking.ServiceEntry {
	se := &networking.ServiceEntry{
		Hosts:      []string{Host(i)},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Ports:      []*networking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC,
	}
	for e := range 10 {
		se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{
			Address: fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, e+1),
			Labels: map[string]string{"app": fmt.Sprint("svc-", i), "version": fmt.Sprint("v", gen),
				"topology.kubernetes.io/zone": fmt.Sprint("zone-", e%3)},
			Locality: fmt.Sprint("region/zone-", e%3),
		})
	}
	return se
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIngest1000ServiceEntries measures the CPU a server spends to take in one push of
// 1,000 ServiceEntries of about 2 KiB: for mcpbridge, the store's validation, versioning and
// encoding and the translation of all of them into Envoy resources, written back; for
// go-control-plane, a LinearCache update with the same messages (it neither validates nor
// translates). The first push (every ServiceEntry new) is cpu-ms/first-push; each of b.N
// pushes that follow (every ServiceEntry's endpoints changed) is cpu-ms/push. Same process,
// same run; inputs are built, and the garbage of building them collected, outside the
// measurement.
func BenchmarkIngest1000ServiceEntries(b *testing.B) {
	const n = 1000
	b.Run("mcpbridge", func(b *testing.B) {
		st := store.New(store.Options{Validate: kinds.ValidateResource})
		ctrl := envoy.New(envoy.Options{Store: st})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ctrl.Run(ctx) }()
		defer func() { cancel(); <-done }()
		reportPushes(b, func(gen int) func() {
			rs := make([]*mcpapi.Resource, n)
			for i := range rs {
				body := &anypb.Any{}
				if err := anypb.MarshalFrom(body, bigServiceEntry(i, gen), proto.MarshalOptions{Deterministic: true}); err != nil {
					b.Fatal(err)
				}
				rs[i] = &mcpapi.Resource{Metadata: &mcpapi.Metadata{Name: Name(i)}, Body: body}
			}
			return func() {
				res, err := st.Apply("producer", store.Update{Collection: seCollection, Full: true, Resources: rs})
				if err != nil {
					b.Fatal(err)
				}
				<-ctrl.Synced(res.Revision)
			}
		})
	})
	b.Run("go-control-plane", func(b *testing.B) { gcpPush(b, n, false) })
	// The LinearCache encodes a resource only when it sends it: this is the update plus one
	// deterministic encoding of each resource, the least a server that sends them must do.
	b.Run("go-control-plane+encode", func(b *testing.B) { gcpPush(b, n, true) })
}

// reportPushes measures the CPU of generation 0's push (first-push), then of b.N more (push),
// each push prepared outside the measurement.
func reportPushes(b *testing.B, prepare func(gen int) (push func())) {
	var first, later time.Duration
	for gen := 0; gen <= b.N; gen++ {
		push := prepare(gen)
		runtime.GC()
		before := cpuTime()
		push()
		if cpu := cpuTime() - before; gen == 0 {
			first = cpu
		} else {
			later += cpu
		}
	}
	b.ReportMetric(float64(first.Microseconds())/1000, "cpu-ms/first-push")
	b.ReportMetric(float64(later.Microseconds())/1000/float64(b.N), "cpu-ms/push")
}

// gcpPush measures go-control-plane's LinearCache taking pushes of n ServiceEntries, and with
// encode one deterministic encoding of each.
func gcpPush(b *testing.B, n int, encode bool) {
	c := gcpcache.NewLinearCache("networking.istio.io/v1alpha3/ServiceEntry")
	reportPushes(b, func(gen int) func() {
		in := make(map[string]types.Resource, n)
		for i := range n {
			in[Name(i)] = bigServiceEntry(i, gen)
		}
		return func() {
			if err := c.UpdateResources(in, nil); err != nil {
				b.Fatal(err)
			}
			for _, r := range in {
				if !encode {
					break
				}
				if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(r); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
