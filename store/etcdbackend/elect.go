package etcdbackend

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// electionPrefix is where replicas campaign to ingest the shared sources (files, upstreams).
const electionPrefix = "e/"

// Ingest runs ingest only while this replica is the elected ingester of the shared sources:
// one replica reads the files and dials the upstreams, and its writes reach every replica
// through etcd. It campaigns (etcd's concurrency.Election on the session lease), runs ingest
// with a context that ends when the leadership does (session lost, ctx done), and campaigns
// again after. It returns when ctx ends, or with ingest's error.
func (b *Backend) Ingest(ctx context.Context, ingest func(context.Context) error) error {
	for ctx.Err() == nil {
		sess := b.session.current()
		if sess == nil {
			return errors.New("etcd backend: Ingest before Start")
		}
		e := concurrency.NewElection(sess, b.prefix+electionPrefix+"ingester")
		if err := e.Campaign(ctx, b.name); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			b.log.Warn("campaign to ingest the shared sources failed; trying again", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		b.ingesting.Store(true)
		b.log.Info("elected to ingest the shared sources (files, upstreams)")
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sess.Done():
			case <-lctx.Done():
			}
			cancel()
		}()
		err := ingest(lctx)
		cancel()
		b.ingesting.Store(false)
		rctx, rcancel := context.WithTimeout(context.Background(), b.timeout)
		_ = e.Resign(rctx)
		rcancel()
		if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil && !ended(sess) {
			return err
		}
		if ctx.Err() == nil {
			b.log.Warn("no longer the ingester of the shared sources; campaigning again")
		}
	}
	return nil
}

// Ingesting says whether this replica is the elected ingester now.
func (b *Backend) Ingesting() bool { return b.ingesting.Load() }

// Status is what /debug/replica shows.
type Status struct {
	Backend string `json:"backend"`
	Replica string `json:"replica"`
	Prefix  string `json:"prefix"`
	Applied int64  `json:"applied_revision"`
	// Seen is the newest etcd revision this replica heard of; Seen - Applied is its lag.
	Seen      int64  `json:"etcd_revision"`
	Lag       int64  `json:"lag_revisions"`
	Ready     bool   `json:"ready"`
	Reason    string `json:"not_ready_reason,omitempty"`
	Ingesting bool   `json:"ingesting_shared_sources"`
}

// Status describes the replica.
func (b *Backend) Status() Status {
	ok, why := b.Ready()
	b.mu.Lock()
	applied, seen := b.applied, max(b.seen, b.applied)
	b.mu.Unlock()
	return Status{Backend: "etcd", Replica: b.name, Prefix: b.prefix, Applied: applied, Seen: seen, Lag: seen - applied,
		Ready: ok, Reason: why, Ingesting: b.Ingesting()}
}

func ended(s *concurrency.Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}
