package redisstore_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// commandCounter counts the commands a go-redis client sends.
type commandCounter struct{ n atomic.Int64 }

func (*commandCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestCommandsPerCall: judging on Redis's clock costs no round trip: every
// call is one script (Get too, where it was one HMGET), which reads TIME
// and the key's PTTL where it reads the record. Taking over an earlier
// version's stale record adds one, once per such record.
func TestCommandsPerCall(t *testing.T) {
	t.Parallel()
	client := newClient(t, nil)
	var counter commandCounter
	client.AddHook(&counter)
	s, prefix := newStore(t, client)
	ctx := context.Background()
	count := storetest.Counter(t, "commands", counter.n.Load)
	reserve := func(req store.ReserveRequest, acquire bool) func() error {
		return func() error {
			res, err := s.Reserve(ctx, req)
			if err == nil && res.Acquired != acquire {
				t.Errorf("reserve %s: %+v, want acquired %v", req.Record.Key, res, acquire)
			}
			return err
		}
	}
	withToken := func(req store.ReserveRequest, token uint64) store.ReserveRequest {
		req.Record.Token = token
		return req
	}
	// Once each, so that the server knows every script: a script it does
	// not know yet costs an EVAL after the EVALSHA, once per server.
	warm := withToken(request("warm", time.Hour), 9)
	_, _ = s.Reserve(ctx, warm)
	_, _ = s.Get(ctx, "test", warm.Record.KeyHash)
	_ = s.Renew(ctx, store.Fence{KeyHash: warm.Record.KeyHash, Token: 9}, time.Minute)
	_ = s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: warm.Record.KeyHash, Token: 9}, State: store.Failed, TTL: time.Hour})
	_ = s.Release(ctx, store.Fence{KeyHash: warm.Record.KeyHash, Token: 9})

	ok, failed := withToken(request("ok", time.Hour), 1), withToken(request("failed", time.Hour), 2)
	count("Reserve of a new key", 1, reserve(ok, true))
	count("Reserve of a held key", 1, reserve(withToken(request("ok", time.Hour), 3), false))
	count("Get", 1, func() error { _, err := s.Get(ctx, "test", ok.Record.KeyHash); return err })
	count("Renew", 1, func() error { return s.Renew(ctx, store.Fence{KeyHash: ok.Record.KeyHash, Token: 1}, time.Minute) })
	count("Complete", 1, func() error {
		return s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: ok.Record.KeyHash, Token: 1}, State: store.Succeeded, TTL: time.Hour})
	})
	count("Reserve of a completed key", 1, reserve(withToken(request("ok", time.Hour), 4), false))
	if res, err := s.Reserve(ctx, failed); err != nil || !res.Acquired {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: failed.Record.KeyHash, Token: 2}, State: store.Failed, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	count("Release", 1, func() error { return s.Release(ctx, store.Fence{KeyHash: failed.Record.KeyHash, Token: 2}) })

	// An earlier version's record, dead: the first look starts watching
	// it, the takeover a lease later reads it once more.
	e := &earlier{c: newClient(t, nil), prefix: prefix, lease: 100 * time.Millisecond}
	if !e.reserve(t, "earlier", 6) {
		t.Fatal("the earlier version did not reserve")
	}
	taker := withToken(request("earlier", time.Hour), 7)
	taker.Lease = e.lease
	count("Reserve of an earlier version's held key", 1, reserve(taker, false))
	time.Sleep(e.lease + e.lease/2)
	count("Reserve taking over an earlier version's stale record", 2, reserve(taker, true))
}
