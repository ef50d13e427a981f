package etcdbackend

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// collectOrphans deletes the chunks of large writes that can never be committed: no commit
// record names them, and the session lease their transaction ID names is gone. A commit
// record is written only while its writer's alive key holds that lease (commitChunked), so
// once the lease is gone no record can appear; the deletion is still conditional on there
// being none, for a record written before the lease ran out. It returns how many writes'
// chunks it deleted. Chunks of a live writer, and of committed writes not yet copied, stay.
func (b *Backend) collectOrphans(ctx context.Context) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	resp, err := b.cli.Txn(rctx).Then(
		clientv3.OpGet(b.prefix+chunkPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(b.prefix+commitPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return 0, err
	}
	committed := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if _, txid, err := pairOf(strings.TrimPrefix(string(kv.Key), b.prefix), commitPrefix); err == nil {
			committed[txid] = true
		}
	}
	type write struct{ owner, txid string }
	var candidates []write
	seen := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		owner, txid, err := chunkOf(strings.TrimPrefix(string(kv.Key), b.prefix))
		if err != nil || committed[txid] || seen[txid] {
			continue
		}
		seen[txid] = true
		candidates = append(candidates, write{owner, txid})
	}
	collected := 0
	for _, w := range candidates {
		lease := txidLease(w.txid)
		if lease == 0 {
			continue // not a transaction ID of this bridge: left alone
		}
		ttl, err := b.cli.TimeToLive(rctx, lease)
		if err != nil || ttl.TTL > 0 {
			continue // its writer may still commit it
		}
		del, err := b.cli.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(b.prefix+commitKey(w.owner, w.txid)), "=", 0)).
			Then(clientv3.OpDelete(b.prefix+chunksPrefix(w.owner, w.txid), clientv3.WithPrefix())).Commit()
		if err != nil {
			return collected, err
		}
		if del.Succeeded {
			collected++
			b.log.Info("deleted the chunks of a write its replica never committed (it died)", "owner", w.owner, "txid", w.txid)
		}
	}
	return collected, nil
}

// collectOrphansEvery runs collectOrphans now and every interval until ctx ends:
// housekeeping on a timer, which no reader or writer waits on.
func (b *Backend) collectOrphansEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := b.collectOrphans(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("could not collect abandoned chunks; trying again later", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
