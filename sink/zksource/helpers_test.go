package zksource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/mcpbridge/mcpbridge/internal/testlog"
	"github.com/mcpbridge/mcpbridge/internal/zktest"
	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/store"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	coll = "istio/networking/v1alpha3/serviceentries"
	// waitLimit bounds every wait for the store to follow ZooKeeper: generous, for a loaded
	// machine under the race detector; a passing test waits for milliseconds.
	waitLimit = 30 * time.Second
)

var openACL = zk.WorldACL(zk.PermAll)

// env is one test's ZooKeeper, a client that registers services in it as Dubbo and Spring
// Cloud do, and the store a source writes to.
type env struct {
	t      *testing.T
	zk     *zktest.Server
	client *zk.Conn
	st     *store.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := zktest.Start(t)
	return &env{
		t:      t,
		zk:     srv,
		client: srv.Client(t, 20*time.Second),
		st:     store.New(store.Options{Validate: kinds.ValidateResource}),
	}
}

// running is a Source run by a test, with a signal at each burst it handles.
type running struct {
	*Source
	bursts chan struct{}
	stop   func()
}

// run starts a source named "reg" on the env's server and store; it is stopped, and its Run
// checked to have returned nil, when the test ends. edit changes the options or the source
// before Run.
func (e *env) run(edit func(*Options, *Source)) *running {
	e.t.Helper()
	opts := Options{Name: "reg", Servers: []string{e.zk.Addr()}, SessionTimeout: 2 * time.Second,
		Store: e.st, Logger: testlog.New(e.t)}
	src, err := New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	r := &running{Source: src, bursts: make(chan struct{}, 1)}
	src.synced = func() {
		select {
		case r.bursts <- struct{}{}:
		default:
		}
	}
	if edit != nil {
		edit(&src.opts, src)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("Run returned %v", err)
			}
		})
	}
	e.t.Cleanup(r.stop)
	return r
}

// ready waits until the source has read the registry whole once.
func (r *running) ready(t *testing.T) {
	t.Helper()
	select {
	case <-r.Ready():
	case <-time.After(waitLimit):
		t.Fatalf("source not ready after %v; faults %v", waitLimit, r.Faults())
	}
}

// waitFor waits until cond holds, looking again at each write to the store's ServiceEntries
// and at each burst the source handles; it fails the test after waitLimit, with what cond
// said last.
func (e *env) waitFor(r *running, what string, cond func() error) {
	e.t.Helper()
	w := e.st.Watch(coll)
	defer w.Close()
	deadline := time.After(waitLimit)
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-w.C():
		case <-r.bursts:
		case <-deadline:
			e.t.Fatalf("%s: not after %v: %v (faults %v)", what, waitLimit, err, r.Faults())
		}
	}
}

// entries are the ServiceEntries the owner holds in the store, by name.
func (e *env) entries(owner string) map[string]*networking.ServiceEntry {
	e.t.Helper()
	out := map[string]*networking.ServiceEntry{}
	e.st.View().Owned(coll, owner, func(en *store.Entry) bool {
		_, value := en.Body()
		se := &networking.ServiceEntry{}
		if err := proto.Unmarshal(value, se); err != nil {
			e.t.Fatalf("%s: %v", en.Name, err)
		}
		out[en.Name] = se
		return true
	})
	return out
}

// endpointsOf lists a ServiceEntry's endpoints as ADDRESS:PORTS, sorted, or says it is not
// there.
func (e *env) endpointsOf(name string) ([]string, error) {
	se, ok := e.entries("zookeeper:reg")[name]
	if !ok {
		return nil, fmt.Errorf("no ServiceEntry %s", name)
	}
	var out []string
	for _, ep := range se.GetEndpoints() {
		var ports []string
		for _, n := range slices.Sorted(maps.Keys(ep.GetPorts())) {
			ports = append(ports, fmt.Sprintf("%s=%d", n, ep.GetPorts()[n]))
		}
		out = append(out, ep.GetAddress()+" "+strings.Join(ports, ","))
	}
	slices.Sort(out)
	return out, nil
}

// hasEndpoints is a waitFor condition: the ServiceEntry's endpoints are these.
func (e *env) hasEndpoints(name string, want ...string) func() error {
	return func() error {
		got, err := e.endpointsOf(name)
		if err != nil {
			return err
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s has endpoints %q, want %q", name, got, want)
		}
		return nil
	}
}

// absent is a waitFor condition: the owner holds no ServiceEntry of this name.
func (e *env) absent(name string) func() error {
	return func() error {
		if _, ok := e.entries("zookeeper:reg")[name]; ok {
			return fmt.Errorf("%s is still served", name)
		}
		return nil
	}
}

// providerURL is a provider's URL as Dubbo writes it, parameters sorted as Dubbo sorts them.
func providerURL(scheme, addr, iface string, params ...string) string {
	q := url.Values{"interface": {iface}, "side": {"provider"}, "application": {"demo"}}
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	return fmt.Sprintf("%s://%s/%s?%s", scheme, addr, iface, q.Encode())
}

// register creates a provider's znode as Dubbo's ZooKeeper registry does: the interface's
// providers znode persistent, the provider's an ephemeral child (flags zk.FlagEphemeral; 0
// makes it persistent) named by its URL, URL-encoded, whose data is the provider's IP
// (Curator's default). It returns the znode's path.
func (e *env) register(root, iface, providerURL string, flags int32) string {
	e.t.Helper()
	dir := root + "/" + url.QueryEscape(iface) + "/providers"
	e.mkdirs(dir)
	p := dir + "/" + url.QueryEscape(providerURL)
	e.create(p, []byte("127.0.0.1"), flags)
	return p
}

// registerSpring creates a Spring Cloud instance's znode (ephemeral, as Curator registers
// one) with its JSON, and returns its path.
func (e *env) registerSpring(root, name, id, data string) string {
	e.t.Helper()
	e.mkdirs(root + "/" + name)
	p := root + "/" + name + "/" + id
	e.create(p, []byte(data), zk.FlagEphemeral)
	return p
}

func (e *env) create(p string, data []byte, flags int32) {
	e.t.Helper()
	e.retry("create "+p, func() error {
		_, err := e.client.Create(p, data, flags, openACL)
		return err
	})
}

// mkdirs creates a znode and its parents, persistent, where they are missing.
func (e *env) mkdirs(p string) {
	e.t.Helper()
	if p == "/" {
		return
	}
	e.mkdirs(path.Dir(p))
	e.retry("create "+p, func() error {
		_, err := e.client.Create(p, nil, 0, openACL)
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
}

func (e *env) remove(p string) {
	e.t.Helper()
	e.retry("delete "+p, func() error { return e.client.Delete(p, -1) })
}

func (e *env) set(p, data string) {
	e.t.Helper()
	e.retry("set "+p, func() error {
		_, err := e.client.Set(p, []byte(data), -1)
		return err
	})
}

// retry does a client operation again while the client is reconnecting (after a server
// restart).
func (e *env) retry(what string, op func() error) {
	e.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		err := op()
		if err == nil {
			return
		}
		if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) || time.Now().After(deadline) {
			e.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// faultsMatching are the source's faults whose text has every one of these parts.
func faultsMatching(r *running, parts ...string) []string {
	var out []string
	for _, f := range r.Faults() {
		if containsAll(f.Error(), parts...) {
			out = append(out, f.Error())
		}
	}
	return out
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
