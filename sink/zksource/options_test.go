package zksource

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpbridge/mcpbridge/store"
)

func TestNewRefusesBadOptionsNamingTheValue(t *testing.T) {
	st := store.New(store.Options{})
	good := func() Options {
		return Options{Name: "reg", Servers: []string{"zk-0.zk:2181"}, Store: st}
	}
	for _, c := range []struct {
		edit  func(*Options)
		words []string
	}{
		{func(o *Options) { o.Name = "" }, []string{`name ""`, "DNS-1123 label"}},
		{func(o *Options) { o.Name = "Prod_Registry" }, []string{`name "Prod_Registry"`}},
		{func(o *Options) { o.Name = strings.Repeat("a", 64) }, []string{"at most 63"}},
		{func(o *Options) { o.Servers = nil }, []string{`"reg"`, "no servers"}},
		{func(o *Options) { o.Servers = []string{"zk-0.zk"} }, []string{`server "zk-0.zk"`, "HOST:PORT"}},
		{func(o *Options) { o.Servers = []string{":2181"} }, []string{`server ":2181"`, "no host"}},
		{func(o *Options) { o.Servers = []string{"zk:0"} }, []string{`server "zk:0"`, "1-65535"}},
		{func(o *Options) { o.Servers = []string{"zk:2181", "zk:http"} }, []string{`server "zk:http"`}},
		{func(o *Options) { o.SessionTimeout = -time.Second }, []string{"session_timeout -1s"}},
		{func(o *Options) { o.DubboRoot = "dubbo" }, []string{`dubbo_root "dubbo"`, "absolute"}},
		{func(o *Options) { o.SpringRoot = "/services/" }, []string{`spring_root "/services/"`}},
		{func(o *Options) { o.SpringRoot = "/a/../services" }, []string{`spring_root "/a/../services"`}},
		{func(o *Options) { o.DubboRoot = "/" }, []string{`dubbo_root "/"`}},
		{func(o *Options) { o.DubboRoot, o.SpringRoot = "/reg", "/reg/services" }, []string{`"/reg"`, `"/reg/services"`, "overlap"}},
		{func(o *Options) { o.SpringRoot = "/dubbo" }, []string{"overlap"}},
		{func(o *Options) { o.Store = nil }, []string{"no store"}},
	} {
		o := good()
		c.edit(&o)
		_, err := New(o)
		if err == nil {
			t.Errorf("%+v: accepted", o)
			continue
		}
		if !containsAll(err.Error(), c.words...) {
			t.Errorf("%+v: %q, want it to say %q", o, err, c.words)
		}
	}
}

func TestNewFillsInDefaults(t *testing.T) {
	s, err := New(Options{Name: "reg", Servers: []string{"127.0.0.1:2181"}, Store: store.New(store.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.SessionTimeout != DefaultSessionTimeout || s.opts.DubboRoot != "/dubbo" || s.opts.SpringRoot != "/services" {
		t.Fatalf("options %+v", s.opts)
	}
	if s.Owner() != "zookeeper:reg" {
		t.Fatalf("owner %q", s.Owner())
	}
}

// A source whose ZooKeeper cannot be reached is not ready, says why, and stops when asked;
// Run cannot be called twice.
func TestUnreachableZooKeeperIsAFaultAndRunStops(t *testing.T) {
	s, err := New(Options{Name: "reg", Servers: []string{"127.0.0.1:1"}, Store: store.New(store.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.After(waitLimit)
	for len(s.Faults()) == 0 {
		select {
		case <-deadline:
			t.Fatal("no fault")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if f := s.Faults(); len(f) != 1 || !strings.Contains(f[0].Error(), "not connected to ZooKeeper (127.0.0.1:1); nothing read yet") {
		t.Fatalf("faults %v", f)
	}
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second Run: %v", err)
	}
	select {
	case <-s.Ready():
		t.Fatal("ready without ZooKeeper")
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
	}
}
