package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// conn is what the store needs of a Redis client: run one of its scripts on
// one key. Replies come as go-redis gives them: an int64, or a []any of
// strings, int64s and nils.
type conn interface {
	eval(ctx context.Context, s *script, key string, args []string) (any, error)
	// evalWait is eval followed, on the same connection, by WAIT replicas
	// timeout: the script's reply and how many replicas confirmed what the
	// connection wrote.
	evalWait(ctx context.Context, s *script, key string, args []string, replicas int, timeout time.Duration) (any, int64, error)
	// replication returns INFO replication of every primary (one per
	// shard of a cluster) and their min-replicas-to-write ("" when CONFIG
	// GET is not allowed).
	replication(ctx context.Context) ([]primaryInfo, error)
	// closed reports whether err says the client was closed.
	closed(err error) bool
	// publish sends msg on channel.
	publish(ctx context.Context, channel, msg string) error
	// listen subscribes to channel on a connection of its own, calls ready
	// once the subscription is confirmed and wake with every message, and
	// returns when ctx ends or the connection breaks.
	listen(ctx context.Context, channel string, ready func(), wake func(string)) error
}

// goredisConn runs the store on a go-redis client: a connection per
// concurrent call, one write and one read per command.
type goredisConn struct{ c redis.UniversalClient }

func (g goredisConn) eval(ctx context.Context, s *script, key string, args []string) (any, error) {
	a := make([]any, len(args))
	for i, v := range args {
		a[i] = v
	}
	return s.goredis.Run(ctx, g.c, []string{key}, a...).Result()
}

// evalWait pipelines the script and WAIT on one connection, the key's
// primary's on a cluster.
func (g goredisConn) evalWait(ctx context.Context, s *script, key string, args []string, replicas int, timeout time.Duration) (any, int64, error) {
	a := make([]any, len(args))
	for i, v := range args {
		a[i] = v
	}
	// WAIT has no key: on a cluster it must go to the connection of the
	// key's primary, which took the write.
	var c redis.Cmdable = g.c
	if cc, ok := g.c.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, 0, err
		}
		c = node
	}
	run := func(sha bool) (*redis.Cmd, *redis.Cmd) {
		var ev *redis.Cmd
		var w *redis.Cmd
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if sha {
				ev = p.EvalSha(ctx, s.goredis.Hash(), []string{key}, a...)
			} else {
				ev = p.Eval(ctx, s.src, []string{key}, a...)
			}
			w = p.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
			return nil
		})
		return ev, w
	}
	ev, w := run(true)
	if err := ev.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		ev, w = run(false)
	}
	reply, err := ev.Result()
	if err != nil {
		return nil, 0, err
	}
	acked, err := w.Int64()
	if err != nil {
		return nil, 0, err
	}
	return reply, acked, nil
}

func (g goredisConn) replication(ctx context.Context) ([]primaryInfo, error) {
	one := func(ctx context.Context, c redis.Cmdable) (primaryInfo, error) {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return primaryInfo{}, err
		}
		p := primaryInfo{info: info}
		if kv, err := c.ConfigGet(ctx, "min-replicas-to-write").Result(); err == nil {
			p.minReplicas = kv["min-replicas-to-write"]
		}
		return p, nil
	}
	if cc, ok := g.c.(*redis.ClusterClient); ok {
		var (
			mu  sync.Mutex
			out []primaryInfo
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			p, err := one(ctx, c)
			mu.Lock()
			out = append(out, p)
			mu.Unlock()
			return err
		})
		return out, err
	}
	p, err := one(ctx, g.c)
	return []primaryInfo{p}, err
}

func (goredisConn) closed(err error) bool { return errors.Is(err, redis.ErrClosed) }

func (g goredisConn) publish(ctx context.Context, channel, msg string) error {
	return g.c.Publish(ctx, channel, msg).Err()
}

// listen uses a go-redis PubSub, which has a dedicated connection.
func (g goredisConn) listen(ctx context.Context, channel string, ready func(), wake func(string)) error {
	ps := g.c.Subscribe(ctx, channel)
	defer ps.Close()
	// A blocked read does not watch ctx unless the client was made with
	// ContextTimeoutEnabled: closing the PubSub ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	ready()
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		wake(m.Payload)
	}
}

// rueidisConn runs the store on a rueidis client, which pipelines the
// commands of concurrent callers over one connection per node: about half
// go-redis's CPU per reserve+complete pair under concurrency (see
// BenchmarkClients and docs/bench/STORE-DESIGN.md).
type rueidisConn struct{ c rueidis.Client }

func (r rueidisConn) eval(ctx context.Context, s *script, key string, args []string) (any, error) {
	return s.rueidis.Exec(ctx, r.c, []string{key}, args).ToAny()
}

// evalWait sends the script and WAIT together: rueidis runs a batch that
// holds a blocking command (WAIT is one) on a connection of its own, so
// WAIT counts the replicas that have this script's write.
func (r rueidisConn) evalWait(ctx context.Context, s *script, key string, args []string, replicas int, timeout time.Duration) (any, int64, error) {
	run := func(sha bool) []rueidis.RedisResult {
		ev := r.c.B().Evalsha().Sha1(s.Hash()).Numkeys(1).Key(key).Arg(args...).Build()
		if !sha {
			ev = r.c.B().Eval().Script(s.src).Numkeys(1).Key(key).Arg(args...).Build()
		}
		return r.c.DoMulti(ctx, ev, r.c.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build())
	}
	res := run(true)
	if err, ok := rueidis.IsRedisErr(res[0].Error()); ok && err.IsNoScript() {
		res = run(false)
	}
	reply, err := res[0].ToAny()
	if err != nil {
		return nil, 0, err
	}
	acked, err := res[1].AsInt64()
	if err != nil {
		return nil, 0, err
	}
	return reply, acked, nil
}

func (r rueidisConn) replication(ctx context.Context) ([]primaryInfo, error) {
	info, err := r.c.Do(ctx, r.c.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		return nil, err
	}
	p := primaryInfo{info: info}
	if kv, err := r.c.Do(ctx, r.c.B().ConfigGet().Parameter("min-replicas-to-write").Build()).AsStrMap(); err == nil {
		p.minReplicas = kv["min-replicas-to-write"]
	}
	return []primaryInfo{p}, nil
}

func (rueidisConn) closed(err error) bool { return errors.Is(err, rueidis.ErrClosing) }

// publish retries once when the connection broke under it (a restarted
// server): a notification is a hint, and a second one wakes nobody twice.
// rueidis retries only read-only commands by itself.
func (r rueidisConn) publish(ctx context.Context, channel, msg string) error {
	cmd := func() error { return r.c.Do(ctx, r.c.B().Publish().Channel(channel).Message(msg).Build()).Error() }
	err := cmd()
	if _, isReply := rueidis.IsRedisErr(err); err != nil && !isReply && ctx.Err() == nil {
		err = cmd()
	}
	return err
}

// listen subscribes on a dedicated connection, whose hooks report the
// subscription and its messages.
func (r rueidisConn) listen(ctx context.Context, channel string, ready func(), wake func(string)) error {
	dc, release := r.c.Dedicate()
	defer release()
	var once sync.Once
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { wake(m.Message) },
		OnSubscription: func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" {
				once.Do(ready)
			}
		},
	})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(channel).Build()).Error(); err != nil {
		return err
	}
	select {
	case err := <-broken:
		if err == nil {
			err = errors.New("redisstore: subscription ended")
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
