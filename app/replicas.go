package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/mcpbridge/mcpbridge/store/etcdbackend"
)

// wireStoreBackend puts etcd in front of the store when store.backend is etcd: producers'
// writes are committed there and every replica applies them. With memory, the store takes
// the writes itself.
func (b *Bridge) wireStoreBackend() error {
	b.writer = b.store
	if b.cfg.Store.Backend != "etcd" {
		return nil
	}
	e := b.cfg.Store.Etcd
	tlsConfig, err := etcdTLS(e.TLS)
	if err != nil {
		return ConfigErrorf("store.etcd.tls: %v", err)
	}
	// The client dials lazily: a bridge whose etcd is down at start serves nothing yet and
	// says so on /readyz, and catches up once etcd answers.
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: e.Endpoints, DialTimeout: e.DialTimeout, TLS: tlsConfig,
		Logger: zap.NewNop(), // the backend logs what matters, in the bridge's log
		// Reconnect at least every second once etcd is back: gRPC's default backoff grows to
		// minutes, and a replica would stay cut off (not ready, NACKing) long after etcd
		// answers again.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: e.DialTimeout,
		})},
	})
	if err != nil {
		return ConfigErrorf("store.etcd: %v", err)
	}
	be, err := etcdbackend.New(etcdbackend.Options{
		Client: cli, Prefix: e.Prefix, Store: b.store, Replica: e.Replica, Logger: b.log,
		RequestTimeout: e.RequestTimeout, SessionTTL: e.SessionTTL, MaxTxnOps: e.MaxTxnOps, MaxTxnBytes: e.MaxTxnBytes,
	})
	if err != nil {
		cli.Close()
		return ConfigErrorf("store.etcd: %v", err)
	}
	b.etcd = be
	b.writer = be
	b.ready.Check("store.etcd", func() string {
		if ok, why := be.Ready(); !ok {
			return why
		}
		return ""
	})
	loaded := make(chan struct{})
	b.runners = append(b.runners, runner{name: "store.etcd", run: func(ctx context.Context) error {
		defer cli.Close()
		if err := b.loadFromEtcd(ctx, be, loaded); err != nil {
			return err
		}
		<-ctx.Done()
		be.Close()
		return nil
	}, ready: loaded})
	b.etcdLoaded = loaded
	return nil
}

// loadFromEtcd loads the prefix and follows it, trying again until etcd answers. A replica
// name another live replica holds is a configuration error (exit 2).
func (b *Bridge) loadFromEtcd(ctx context.Context, be *etcdbackend.Backend, loaded chan struct{}) error {
	backoff := 200 * time.Millisecond
	for {
		err := be.Start(ctx)
		if err == nil {
			close(loaded)
			return nil
		}
		if errors.Is(err, etcdbackend.ErrReplicaNameTaken) {
			return ConfigErrorf("%v", err)
		}
		b.log.Warn("could not load the store from etcd; trying again", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// wireIngest runs the shared sources (files, upstreams) on the elected replica only, each
// term with sources of its own, once this replica has loaded etcd's state (the file source's
// first write is then only the difference).
func (b *Bridge) wireIngest(any bool) {
	if !any {
		return
	}
	b.runners = append(b.runners, runner{name: "store.etcd ingest", run: func(ctx context.Context) error {
		select {
		case <-b.etcdLoaded:
		case <-ctx.Done():
			return nil
		}
		return b.etcd.Ingest(ctx, b.runSharedSources)
	}})
}

// runSharedSources runs new file and upstream sources until ctx ends or one fails.
func (b *Bridge) runSharedSources(ctx context.Context) error {
	shared, files, followed, err := b.sharedSources()
	if err != nil {
		return err
	}
	b.ingestedFiles.Store(files)
	defer b.ingestedFiles.Store(nil)
	b.followed.Store(&followed)
	defer b.followed.Store(nil)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(shared))
	for _, r := range shared {
		wg.Go(func() {
			if err := r.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", r.name, err)
				cancel()
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// ingestedFileFaults are the faults of the file source of this replica's term as ingester.
func (b *Bridge) ingestedFileFaults() []error {
	if f := b.ingestedFiles.Load(); f != nil {
		return f.Faults()
	}
	return nil
}

// catchUp is what a stream opening on a replica waits for (etcd backend; nil with memory):
// this replica has applied what etcd had committed, and translated it, so that a client
// coming from another replica with initial versions is not told to remove what this one
// has not caught up with. Bounded by store.etcd.request_timeout.
func (b *Bridge) catchUp() func(context.Context) {
	if b.etcd == nil {
		return nil
	}
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, b.cfg.Store.Etcd.RequestTimeout)
		defer cancel()
		b.etcd.CatchUp(ctx)
		if b.translator != nil {
			select {
			case <-b.translator.Synced(b.store.View().Revision()):
			case <-ctx.Done():
			}
		}
	}
}

// replicaStatus is /debug/replica with the etcd backend; nil with memory.
func (b *Bridge) replicaStatus() func() etcdbackend.Status {
	if b.etcd == nil {
		return nil
	}
	return b.etcd.Status
}

// etcdTLS is the client TLS config for etcd's https:// endpoints; nil without a CA or
// certificate.
func etcdTLS(c EtcdTLS) (*tls.Config, error) {
	if c.CAFile == "" && c.CertFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file/key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
