package zksource

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/mcpbridge/mcpbridge/internal/zktest"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

const (
	benchInterfaces = 1000
	benchPerIface   = 10
)

// BenchmarkDubboProviders10k measures how long a source takes to serve 10,000 Dubbo
// providers (1,000 interfaces of 10 providers each, with the parameters Dubbo writes): from
// Run to every ServiceEntry and endpoint in the store, reported as s-served. The target is
// 5 s.
func BenchmarkDubboProviders10k(b *testing.B) {
	srv := zktest.Start(b)
	client := srv.Client(b, 30*time.Second)
	registerMany(b, client, "/dubbo")
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		total += serveOnce(b, srv.Addr())
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-served")
}

// serveOnce runs a source over a new store until it is ready, checks that the store holds
// every provider, and returns how long it took.
func serveOnce(b *testing.B, addr string) time.Duration {
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	src, err := New(Options{Name: "bench", Servers: []string{addr}, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- src.Run(ctx) }()
	select {
	case <-src.Ready():
	case <-time.After(time.Minute):
		b.Fatalf("not ready after a minute: %v", src.Faults())
	}
	took := time.Since(start)
	b.StopTimer()
	services, endpoints := countServed(b, st, src.Owner())
	if services != benchInterfaces || endpoints != benchInterfaces*benchPerIface {
		b.Fatalf("served %d services, %d endpoints; want %d, %d", services, endpoints, benchInterfaces, benchInterfaces*benchPerIface)
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	return took
}

func countServed(b *testing.B, st *store.Store, owner string) (services, endpoints int) {
	st.View().Owned(coll, owner, func(e *store.Entry) bool {
		_, value := e.Body()
		se := &networking.ServiceEntry{}
		if err := proto.Unmarshal(value, se); err != nil {
			b.Fatal(err)
		}
		services++
		endpoints += len(se.GetEndpoints())
		return true
	})
	return services, endpoints
}

// registerMany registers the benchmark's providers, ephemeral, as Dubbo does, a few hundred
// znodes to a multi-operation.
func registerMany(b *testing.B, c *zk.Conn, root string) {
	var ops []any
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := c.Multi(ops...); err != nil {
			b.Fatal(err)
		}
		ops = ops[:0]
	}
	add := func(p string, flags int32) {
		ops = append(ops, &zk.CreateRequest{Path: p, Data: []byte("10.0.0.1"), Acl: openACL, Flags: flags})
		if len(ops) == 500 {
			flush()
		}
	}
	add(root, 0)
	for i := range benchInterfaces {
		iface := fmt.Sprintf("com.example.bench.Service%04d", i)
		add(root+"/"+iface, 0)
		add(root+"/"+iface+"/providers", 0)
		for j := range benchPerIface {
			u := providerURL("dubbo", fmt.Sprintf("10.%d.%d.%d:20880", i/250, i%250, j+1), iface,
				"version", "1.0.0", "group", "bench", "anyhost", "true", "dynamic", "true", "generic", "false",
				"methods", "get,put,list,delete", "pid", fmt.Sprint(1000+j), "release", "3.2.10",
				"timestamp", fmt.Sprint(1700000000000+int64(i*benchPerIface+j)))
			add(root+"/"+iface+"/providers/"+url.QueryEscape(u), zk.FlagEphemeral)
		}
	}
	flush()
}
