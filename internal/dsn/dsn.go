package dsn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net/url"
	"strconv"
	"strings"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
	"github.com/idem-dev/idem/store/memory"
	pebblestore "github.com/idem-dev/idem/store/pebble"
	"github.com/idem-dev/idem/store/postgres"
	redisstore "github.com/idem-dev/idem/store/redis"
	s3store "github.com/idem-dev/idem/store/s3"
)

// Kinds of store.
const (
	Memory   = "memory"
	File     = "file"
	Pebble   = "pebble"
	Postgres = "postgres"
	Redis    = "redis"
	// RedisCluster is a Redis Cluster: redis-cluster://HOST:PORT (any
	// node), with more seed nodes as ?addr=HOST:PORT; rediss-cluster://
	// for TLS. The other parameters are go-redis's cluster URL parameters.
	RedisCluster = "redis-cluster"
	S3           = "s3"
)

// ErrUnknownScheme: the DSN names no store this build knows.
var ErrUnknownScheme = errors.New("unknown store DSN")

// ErrNotPostgres: a PostgreSQL-only operation (migrate) on another store.
var ErrNotPostgres = errors.New("not a PostgreSQL store")

// DSN is a parsed store DSN.
type DSN struct {
	Kind string
	// Path is the directory of a file store.
	Path string
	// URL is the driver's own DSN, idem_ parameters removed (postgres,
	// redis).
	URL string
	// Params are the idem_ parameters, without the prefix.
	Params map[string]string
	raw    string
}

// Parse parses dsn without opening anything.
func Parse(dsn string) (DSN, error) {
	d := DSN{raw: dsn, Params: map[string]string{}}
	scheme, rest, _ := strings.Cut(dsn, ":")
	switch strings.ToLower(scheme) {
	case "memory":
		d.Kind = Memory
		if rest != "" && rest != "//" {
			return d, fmt.Errorf("store %q: memory takes no path (write memory:)", dsn)
		}
		return d, nil
	case "file", "pebble":
		d.Kind = File
		if strings.EqualFold(scheme, "pebble") {
			d.Kind = Pebble
		}
		d.Path = rest
		if strings.HasPrefix(rest, "//") { // file:///var/lib/idem
			u, err := url.Parse(dsn)
			if err != nil {
				return d, fmt.Errorf("store %q: %v", dsn, err)
			}
			if u.Host != "" && u.Host != "localhost" {
				return d, fmt.Errorf("store %q: a file store is local; write file:/path or file:///path", dsn)
			}
			d.Path = u.Path
		}
		if d.Path == "" {
			return d, fmt.Errorf("store %q: %s needs a directory, e.g. %s:./idem-data", dsn, d.Kind, d.Kind)
		}
		return d, nil
	case "postgres", "postgresql":
		d.Kind = Postgres
	case "redis", "rediss":
		d.Kind = Redis
	case "redis-cluster", "rediss-cluster":
		d.Kind = RedisCluster
	case "dynamodb":
		d.Kind = DynamoDB
		if _, err := ParseDynamoDB(dsn); err != nil {
			return d, fmt.Errorf("store %q: %w", Redact(dsn), err)
		}
		d.URL = dsn
		return d, nil
	case "s3":
		d.Kind = S3
		if _, err := s3store.ParseDSN(dsn); err != nil {
			return d, fmt.Errorf("store %q: %w", Redact(dsn), err)
		}
		d.URL = dsn
		return d, nil
	default:
		return d, fmt.Errorf("store %q: %w: want memory:, file:PATH, pebble:PATH, postgres://HOST/DB, redis://HOST:PORT, redis-cluster://HOST:PORT?addr=HOST:PORT, s3://BUCKET/PREFIX?endpoint=URL or dynamodb://TABLE?region=REGION", Redact(dsn), ErrUnknownScheme)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return d, fmt.Errorf("store %q: %v", Redact(dsn), err)
	}
	q := u.Query()
	for k, vs := range q {
		if name, ok := strings.CutPrefix(k, "idem_"); ok {
			d.Params[name] = vs[len(vs)-1]
			q.Del(k)
		}
	}
	known := map[string][]string{Postgres: {"schema", "table"}, Redis: {"prefix", "flush_delay", "connections"}, RedisCluster: {"prefix"}}[d.Kind]
	for k := range d.Params {
		if !contains(known, k) {
			return d, fmt.Errorf("store %q: unknown parameter idem_%s (want idem_%s)", Redact(dsn), k, strings.Join(known, ", idem_"))
		}
	}
	u.RawQuery = q.Encode()
	if d.Kind == RedisCluster {
		// go-redis's cluster URL has the plain redis schemes.
		u.Scheme = strings.TrimSuffix(strings.ToLower(u.Scheme), "-cluster")
		if _, err := redis.ParseClusterURL(u.String()); err != nil {
			return d, fmt.Errorf("store %q: %v", Redact(dsn), err)
		}
	}
	d.URL = u.String()
	return d, nil
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// String returns the DSN with any password hidden, for logs.
func (d DSN) String() string { return Redact(d.raw) }

// Redact hides the password of a URL-shaped DSN.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	return u.Redacted()
}

// Options tune Open.
type Options struct {
	// Logger is handed to stores that log. nil means slog.Default().
	Logger *slog.Logger
	// Migrate runs the PostgreSQL migrations after connecting.
	Migrate bool
	// ConnectTimeout bounds connecting (and migrating). 0 means 15 s.
	ConnectTimeout time.Duration
}

// Opened is an open store and what it took to open it.
type Opened struct {
	store.Store
	DSN DSN
	// closers run after the store's Close, in order (pools, clients).
	closers []func()
}

// Close closes the store, then the clients it was given.
func (o *Opened) Close() error {
	err := o.Store.Close()
	for _, c := range o.closers {
		c()
	}
	return err
}

// Open opens the store dsn names, checking that it answers.
func Open(ctx context.Context, dsn string, opts Options) (*Opened, error) {
	d, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	switch d.Kind {
	case Memory:
		return &Opened{Store: memory.New(), DSN: d}, nil
	case File:
		s, err := file.Open(d.Path, file.Options{Logger: opts.Logger})
		if err != nil {
			if errors.Is(err, file.ErrLocked) {
				return nil, fmt.Errorf("store %s: %w: an idem gateway is probably running on it; work through the gateway instead (--admin http://ITS_ADMIN_LISTEN with its admin_token), or stop it first", d, err)
			}
			return nil, fmt.Errorf("store %s: %w", d, err)
		}
		return &Opened{Store: s, DSN: d}, nil
	case Pebble:
		s, err := pebblestore.Open(d.Path, pebblestore.Options{Logger: opts.Logger})
		if err != nil {
			if errors.Is(err, pebblestore.ErrLocked) {
				return nil, fmt.Errorf("store %s: %w (is an idem gateway running on it? stop it first, or use its admin listener)", d, err)
			}
			return nil, fmt.Errorf("store %s: %w", d, err)
		}
		return &Opened{Store: s, DSN: d}, nil
	case Postgres:
		return openPostgres(ctx, d, opts)
	case Redis:
		return openRedis(ctx, d)
	case RedisCluster:
		return openRedisCluster(ctx, d)
	case S3:
		return openS3(ctx, d)
	case DynamoDB:
		return openDynamoDB(ctx, d, opts)
	}
	return nil, fmt.Errorf("store %s: %w", d, ErrUnknownScheme)
}

func (d DSN) postgresOptions() postgres.Options {
	return postgres.Options{Schema: d.Params["schema"], Table: d.Params["table"]}
}

func pgPool(ctx context.Context, d DSN) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		return nil, fmt.Errorf("store %s: %v", d, err)
	}
	// pgx's default pool (4 connections on 2 cores) queues a gateway's
	// concurrent requests; 16 unless the DSN says pool_max_conns.
	if !strings.Contains(d.URL, "pool_max_conns") && cfg.MaxConns < 16 {
		cfg.MaxConns = 16
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store %s: %v", d, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store %s: cannot connect: %w", d, err)
	}
	return pool, nil
}

func openPostgres(ctx context.Context, d DSN, opts Options) (*Opened, error) {
	pool, err := pgPool(ctx, d)
	if err != nil {
		return nil, err
	}
	po := d.postgresOptions()
	if opts.Migrate {
		if err := postgres.Migrate(ctx, pool, po); err != nil {
			pool.Close()
			return nil, fmt.Errorf("store %s: migrate: %w", d, err)
		}
	}
	s, err := postgres.New(pool, po)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: s, DSN: d, closers: []func(){pool.Close}}, nil
}

// Migrate applies the PostgreSQL migrations of the store dsn names, after
// checking what is really in the database, and reports what it did.
func Migrate(ctx context.Context, dsn string) (postgres.Report, error) {
	d, err := Parse(dsn)
	if err != nil {
		return postgres.Report{}, err
	}
	if d.Kind != Postgres {
		return postgres.Report{}, fmt.Errorf("store %s: %w: only PostgreSQL stores have a schema to migrate", d, ErrNotPostgres)
	}
	pool, err := pgPool(ctx, d)
	if err != nil {
		return postgres.Report{}, err
	}
	defer pool.Close()
	rep, err := postgres.MigrateReport(ctx, pool, d.postgresOptions())
	if err != nil {
		return rep, fmt.Errorf("store %s: %w", d, err)
	}
	return rep, nil
}

// openRedis opens a Redis store on a rueidis client, which pipelines the
// commands of concurrent requests: about half go-redis's CPU per call
// (store/redis's package doc has the figures).
//
// The commands go over one connection (idem_connections=1, a power of
// two) and its writer waits up to 100 µs
// after each write for more of them while several are waiting
// (idem_flush_delay=100us; 0 turns it off; a lone request never waits):
// one write and one read then carry several, on both sides. Measured on the
// project's 2-core machine, the gateway's first calls against a plain
// proxy in interleaved duels: 0.74-0.78x with rueidis's defaults (two
// connections there, no delay), 0.83-0.91x with these; at 4 concurrent
// requests, 4,527 against 4,721-4,768 requests a second (p50 0.83 ms
// against 0.76-0.78), and the same at 1 and 16.
func openRedis(ctx context.Context, d DSN) (*Opened, error) {
	opt, err := rueidis.ParseURL(d.URL)
	if err != nil {
		return nil, fmt.Errorf("store %s: %v", d, err)
	}
	opt.DisableCache = true // the store reads no key through client-side caching
	opt.MaxFlushDelay = 100 * time.Microsecond
	if v, ok := d.Params["flush_delay"]; ok {
		if opt.MaxFlushDelay, err = time.ParseDuration(v); err != nil || opt.MaxFlushDelay < 0 || opt.MaxFlushDelay > time.Second {
			return nil, fmt.Errorf("store %s: idem_flush_delay=%q: want a duration from 0 to 1s, e.g. 100us", d, v)
		}
	}
	opt.PipelineMultiplex = -1 // one connection
	if v, ok := d.Params["connections"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<rueidis.MaxPipelineMultiplex || n&(n-1) != 0 {
			return nil, fmt.Errorf("store %s: idem_connections=%q: want a power of two from 1 to %d", d, v, 1<<rueidis.MaxPipelineMultiplex)
		}
		if n > 1 { // rueidis reads 0 as its default
			opt.PipelineMultiplex = bits.TrailingZeros(uint(n))
		}
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("store %s: cannot connect: %w", d, err)
	}
	if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
		client.Close()
		return nil, fmt.Errorf("store %s: cannot connect: %w", d, err)
	}
	s, err := redisstore.NewRueidis(client, redisstore.Options{Prefix: d.Params["prefix"]})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: s, DSN: d, closers: []func(){client.Close}}, nil
}

func openRedisCluster(ctx context.Context, d DSN) (*Opened, error) {
	co, err := redis.ParseClusterURL(d.URL)
	if err != nil {
		return nil, fmt.Errorf("store %s: %v", d, err)
	}
	co.ContextTimeoutEnabled = true
	if !strings.Contains(d.URL, "pool_size") && co.PoolSize < 64 {
		co.PoolSize = 64 // per node; see openRedis
	}
	client := redis.NewClusterClient(co)
	// A node answering PING is not enough: the cluster must have every
	// slot served, or some keys would fail later.
	info, err := client.ClusterInfo(ctx).Result()
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("store %s: cannot connect: %w", d, err)
	}
	if !strings.Contains(info, "cluster_state:ok") {
		client.Close()
		return nil, fmt.Errorf("store %s: the cluster is not ready (cluster_state is not ok); check redis-cli --cluster check", d)
	}
	s, err := redisstore.New(client, redisstore.Options{Prefix: d.Params["prefix"]})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: s, DSN: d, closers: []func(){func() { client.Close() }}}, nil
}

// redisLogger sends go-redis's own messages (a pool's failed dials, one
// line per attempt) to slog at debug level: the error Open returns says
// the same once.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().DebugContext(ctx, fmt.Sprintf(format, v...), "store", "redis")
}

func init() { redis.SetLogger(redisLogger{}) }

// openS3 opens an S3 store. Credentials come from the AWS SDK's usual chain
// (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, shared files, roles), never
// from the DSN. It checks that the bucket answers.
func openS3(ctx context.Context, d DSN) (*Opened, error) {
	c, err := s3store.ParseDSN(d.URL)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	var loadOpts []func(*awsconfig.LoadOptions) error
	if c.Region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(c.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	client := s3.NewFromConfig(awsCfg, c.ClientOptions)
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &c.Bucket}); err != nil {
		return nil, fmt.Errorf("store %s: cannot reach bucket %q: %w", d, c.Bucket, err)
	}
	st, err := s3store.New(client, c.Options)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: st, DSN: d}, nil
}
