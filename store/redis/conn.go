package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// conn is what the store needs of a Redis client: run one of its scripts on
// one key, read a record's fields. Replies come as go-redis gives them: an
// int64, or a []any of strings and nils.
type conn interface {
	eval(ctx context.Context, s *script, key string, args []string) (any, error)
	hmget(ctx context.Context, key string, fields []string) ([]any, error)
	// closed reports whether err says the client was closed.
	closed(err error) bool
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

func (g goredisConn) hmget(ctx context.Context, key string, fields []string) ([]any, error) {
	return g.c.HMGet(ctx, key, fields...).Result()
}

func (goredisConn) closed(err error) bool { return errors.Is(err, redis.ErrClosed) }

// rueidisConn runs the store on a rueidis client, which pipelines the
// commands of concurrent callers over one connection per node: about half
// go-redis's CPU per reserve+complete pair under concurrency (see
// BenchmarkClients and the package doc).
type rueidisConn struct{ c rueidis.Client }

func (r rueidisConn) eval(ctx context.Context, s *script, key string, args []string) (any, error) {
	return s.rueidis.Exec(ctx, r.c, []string{key}, args).ToAny()
}

func (r rueidisConn) hmget(ctx context.Context, key string, fields []string) ([]any, error) {
	v, err := r.c.Do(ctx, r.c.B().Hmget().Key(key).Field(fields...).Build()).ToAny()
	if err != nil {
		return nil, err
	}
	vals, _ := v.([]any)
	return vals, nil
}

func (rueidisConn) closed(err error) bool { return errors.Is(err, rueidis.ErrClosing) }
