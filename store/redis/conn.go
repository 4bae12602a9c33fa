package redisstore

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// conn is what the store needs of a Redis client: run one of its scripts on
// one key. Replies come as go-redis gives them: an int64, or a []any of
// strings, int64s and nils.
type conn interface {
	eval(ctx context.Context, s *script, key string, args []string) (any, error)
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
