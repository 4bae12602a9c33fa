package dsn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
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
	"github.com/idem-dev/idem/store/postgres"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/replication"
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

// ErrMalformed: the DSN names a known store in a form its parser does not
// read, such as redis:HOST:PORT without the //, which the Redis client
// would have read as localhost:6379. The message shows the right form.
var ErrMalformed = errors.New("malformed store DSN")

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

// Parse parses dsn without opening anything. Every form it does not know
// is refused with the form it wants (ErrUnknownScheme, ErrMalformed): the
// drivers' own parsers read many mistakes as something else (a Redis URL
// without its // as localhost:6379, a # in a password as the end of it).
//
// Its errors, like Open's and Migrate's, hide the DSN's secrets (Redact).
func Parse(dsn string) (DSN, error) {
	d, err := parse(dsn)
	return d, NewRedactor(dsn).Error(err)
}

func parse(dsn string) (DSN, error) {
	d := DSN{raw: dsn, Params: map[string]string{}}
	if strings.TrimSpace(dsn) != dsn {
		return d, malformed(Redact(strings.TrimSpace(dsn)), "white space around it would be part of the DSN; remove it")
	}
	name, rest, _ := strings.Cut(dsn, ":")
	s, ok := schemeOf(name)
	if !ok {
		return d, unknown(dsn)
	}
	d.Kind = s.kind
	if s.opaque != nil {
		return s.opaque(d, rest)
	}
	if !strings.HasPrefix(rest, "//") {
		return d, noSlashes(dsn, name, rest, s)
	}
	return parseURL(d, s)
}

// parseURL reads a DSN that is a URL with a host: the host, the idem_
// parameters (into d.Params), the driver's parameters, then the URL as the
// driver will read it (into d.URL).
func parseURL(d DSN, s *scheme) (DSN, error) {
	dsn := d.raw
	if i := strings.IndexByte(dsn, '#'); i >= 0 {
		return d, malformed(Redact(dsn[:i]), "a # ends the URL there and the rest would be dropped; in a password or a parameter, write # as %23")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return d, fmt.Errorf("store %q: %w: %v; want %s", Redact(dsn), ErrMalformed, errors.Unwrap(err), s.example)
	}
	if err := s.host(u); err != nil {
		return d, badURL(dsn, err)
	}
	q := u.Query()
	if err := d.takeParams(s, q); err != nil {
		return d, err
	}
	if !s.driverStrict {
		for k, vs := range q {
			if vs[0] == "" && k != "skip_verify" {
				return d, malformed(Redact(dsn), fmt.Sprintf("parameter %s is empty; give it a value or remove it", k))
			}
		}
	}
	u.RawQuery = q.Encode()
	d.URL = urlString(u)
	if s.driver != nil {
		d.URL, err = s.driver(dsn, u)
	}
	return d, err
}

// takeParams moves the idem_ parameters of q into d.Params, refusing one
// given twice or empty, one the kind does not take, and a bad
// idem_sync_replicas or idem_sync_timeout. Only addr (Redis Cluster's
// seeds) may be given more than once.
func (d *DSN) takeParams(s *scheme, q url.Values) error {
	dsn := d.raw
	for k, vs := range q {
		if len(vs) > 1 && k != "addr" {
			return malformed(Redact(dsn), fmt.Sprintf("parameter %s is given %d times; give it once", k, len(vs)))
		}
		if name, ok := strings.CutPrefix(k, "idem_"); ok {
			if vs[0] == "" {
				return malformed(Redact(dsn), fmt.Sprintf("parameter %s is empty; give it a value or remove it", k))
			}
			d.Params[name] = vs[0]
			q.Del(k)
		}
	}
	for k := range d.Params {
		if contains(s.params, k) {
			continue
		}
		if len(s.params) == 0 {
			return fmt.Errorf("store %q: %w: unknown parameter idem_%s (an %s store takes none)", Redact(dsn), ErrMalformed, k, d.Kind)
		}
		return fmt.Errorf("store %q: %w: unknown parameter idem_%s (want idem_%s)", Redact(dsn), ErrMalformed, k, strings.Join(s.params, ", idem_"))
	}
	if _, err := d.syncReplicas(); err != nil {
		return badURL(dsn, err)
	}
	return nil
}

func malformed(dsn, why string) error {
	return fmt.Errorf("store %q: %w: %s", dsn, ErrMalformed, why)
}

// noSlashes refuses scheme:rest without the // of a URL's host: the Redis
// client reads redis:127.0.0.1:6390 as localhost:6379.
func noSlashes(dsn, scheme, rest string, s *scheme) error {
	if strings.Trim(rest, "/") == "" {
		return fmt.Errorf("store %q: %w: %s names no host; write %s", dsn, ErrMalformed, s.kind, s.example)
	}
	slashes := rest[:len(rest)-len(strings.TrimLeft(rest, "/"))]
	fixed := Redact(strings.ToLower(scheme) + "://" + rest[len(slashes):])
	shown := scheme + ":" + slashes + fixed[len(scheme)+3:] // the password hidden as in fixed
	return fmt.Errorf("store %q: %w: no // between %s: and the host; write %q", shown, ErrMalformed, scheme, fixed)
}

// unknown refuses a DSN of no known kind, guessing what was meant from its
// shape: a path, or a host and port without a scheme.
func unknown(dsn string) error {
	want := wantKinds()
	switch {
	case dsn == "":
		return fmt.Errorf("store is empty: %w: %s", ErrUnknownScheme, want)
	case strings.HasPrefix(dsn, "/"), strings.HasPrefix(dsn, "."), strings.HasPrefix(dsn, "~"), !strings.Contains(dsn, ":"):
		return fmt.Errorf("store %q: %w: a directory is written file:%s", dsn, ErrUnknownScheme, dsn)
	}
	if host, port, err := net.SplitHostPort(dsn); err == nil && host != "" && port != "" && !strings.Contains(dsn, "/") {
		return fmt.Errorf("store %q: %w: a server is named with its kind, e.g. redis://%s or postgres://USER@%s/DB", dsn, ErrUnknownScheme, dsn, dsn)
	}
	return fmt.Errorf("store %q: %w: %s", Redact(dsn), ErrUnknownScheme, want)
}

// parseDir reads the directory of a file: or pebble: DSN.
func parseDir(d DSN, rest string) (DSN, error) {
	d.Path = rest
	if strings.HasPrefix(rest, "//") { // file:///var/lib/idem
		u, err := url.Parse(d.raw)
		if err != nil {
			return d, fmt.Errorf("store %q: %w: %v", d.raw, ErrMalformed, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return d, fmt.Errorf("store %q: %w: a file store is local and file://%s/ names a host; write %s:%s for a directory relative to the working directory, or %s:///ABSOLUTE/PATH",
				d.raw, ErrMalformed, u.Host, d.Kind, strings.TrimPrefix(u.Host+u.Path, "/"), d.Kind)
		}
		d.Path = u.Path
	}
	switch {
	case d.Path == "":
		return d, fmt.Errorf("store %q: %w: %s needs a directory, e.g. %s:./idem-data", d.raw, ErrMalformed, d.Kind, d.Kind)
	case strings.HasPrefix(rest, "//") && strings.ContainsAny(rest, "?#"):
		return d, fmt.Errorf("store %q: %w: a %s store takes a directory and no parameters; after %s:// a ? or # and what follows would be dropped (write %%3F or %%23 for one in the directory's name)", d.raw, ErrMalformed, d.Kind, d.Kind)
	case strings.Contains(rest, "?"):
		return d, fmt.Errorf("store %q: %w: a %s store takes a directory and no parameters; the ? and what follows would be part of the directory's name", d.raw, ErrMalformed, d.Kind)
	case strings.HasPrefix(d.Path, "~"):
		return d, fmt.Errorf("store %q: %w: ~ is not expanded in a DSN (it would be a directory named ~); write the full path, e.g. %s:/home/USER%s", d.raw, ErrMalformed, d.Kind, d.Path[1:])
	}
	return d, nil
}

func checkPort(hostport string) error {
	if !strings.Contains(strings.TrimPrefix(strings.TrimSuffix(hostport, "]"), "["), ":") || strings.HasSuffix(hostport, "]") {
		return nil // no port
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (%v)", hostport, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q of %s: want a number from 1 to 65535", port, host)
	}
	return nil
}

// redisParams are the parameters of a redis:// URL the Redis client
// reads; it ignores any other without a word.
var redisParams = []string{"db", "dial_timeout", "write_timeout", "addr", "skip_verify", "protocol", "max_retries", "client_name", "master_set"}

func checkRedisParams(u *url.URL) error {
	q := u.Query()
	for k := range q {
		if !contains(redisParams, k) {
			why := ""
			switch k {
			case "client_cache":
				why = " (the store never reads through client-side caching)"
			case "pool_size", "read_timeout", "min_idle_conns", "password", "username":
				why = " (a go-redis parameter; this client does not read it)"
			}
			return fmt.Errorf("unknown parameter %s%s: want %s, or idem_%s", k, why, strings.Join(redisParams, ", "), strings.Join(redisIdemParams, ", idem_"))
		}
	}
	if v := q.Get("protocol"); q.Has("protocol") && v != "2" && v != "3" {
		return fmt.Errorf("protocol=%s: want 2 or 3", v)
	}
	if q.Has("max_retries") && q.Get("max_retries") != "0" {
		return fmt.Errorf("max_retries=%s: the client only reads max_retries=0 (no retries); remove it to keep its retries", q.Get("max_retries"))
	}
	if q.Has("skip_verify") && !strings.EqualFold(u.Scheme, "rediss") {
		return errors.New("skip_verify is for TLS, which redis:// does not use; write rediss:// for TLS or remove it")
	}
	return nil
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

// Options tune Open.
type Options struct {
	// Logger is handed to stores that log. nil means slog.Default().
	Logger *slog.Logger
	// Migrate runs the PostgreSQL migrations after connecting.
	Migrate bool
	// ConnectTimeout bounds connecting (and migrating). 0 means 15 s.
	ConnectTimeout time.Duration
	// Headroom is the room the embedded stores (file:, pebble:) want free
	// before they take a new key: the largest outcome they may have to
	// record. 0 means theirs (1 MiB).
	Headroom int64
}

// Opened is an open store and what it took to open it.
type Opened struct {
	store.Store
	DSN DSN
	// Replication is how the store's server replicates, read at Open, for
	// the stores that tell (PostgreSQL, Redis); nil for the others.
	Replication *replication.Status
	// FramedOnly: the store holds no record named by an identity of the
	// versions before identities framed the scope (store.LegacyHashKey),
	// so that legacy reads (idem.WithLegacyReads) would find nothing: a
	// memory store, or a file: or pebble: directory this version created
	// (see framedOnly). False for the shared stores, which cannot tell.
	FramedOnly bool
	// closers run after the store's Close, in order (pools, clients).
	closers []func()
}

// Unwrap returns the opened store, for callers that look for its optional
// capabilities (store.NotifierOf, store.KeyHasherOf).
func (o *Opened) Unwrap() store.Store { return o.Store }

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
	o, err := open(ctx, dsn, opts)
	return o, NewRedactor(dsn).Error(err)
}

func open(ctx context.Context, dsn string, opts Options) (*Opened, error) {
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
	if s := kindOf(d.Kind); s != nil {
		return s.open(ctx, d, opts)
	}
	return nil, fmt.Errorf("store %s: %w", d, ErrUnknownScheme)
}

func (d DSN) postgresOptions() postgres.Options {
	n, _ := d.syncReplicas()
	return postgres.Options{Schema: d.Params["schema"], Table: d.Params["table"], SyncReplicas: n.replicas, SyncTimeout: n.timeout}
}

// syncSetting is idem_sync_replicas and idem_sync_timeout.
type syncSetting struct {
	replicas int
	timeout  time.Duration
}

// syncReplicas reads idem_sync_replicas (how many replicas every write
// waits for) and idem_sync_timeout (for how long).
func (d DSN) syncReplicas() (syncSetting, error) {
	var n syncSetting
	if v, ok := d.Params["sync_replicas"]; ok {
		var err error
		if n.replicas, err = strconv.Atoi(v); err != nil || n.replicas < 0 || n.replicas > 64 {
			return n, fmt.Errorf("idem_sync_replicas=%q: want how many replicas every write waits for, from 0 to 64", v)
		}
	}
	if v, ok := d.Params["sync_timeout"]; ok {
		var err error
		if n.timeout, err = time.ParseDuration(v); err != nil || n.timeout <= 0 || n.timeout > time.Minute {
			return n, fmt.Errorf("idem_sync_timeout=%q: want a duration above 0 and at most 1m, e.g. 2s", v)
		}
		if n.replicas == 0 {
			return n, fmt.Errorf("idem_sync_timeout bounds the wait for idem_sync_replicas, which is not set: set it or remove idem_sync_timeout")
		}
	}
	return n, nil
}

// replicated reads how an opened store's server replicates
// (replication.Reporter) into Opened.Replication, and refuses a store
// whose idem_sync_replicas the server cannot satisfy, or cannot be shown
// to.
func replicated(ctx context.Context, d DSN) func(*Opened, error) (*Opened, error) {
	return func(o *Opened, err error) (*Opened, error) {
		if err != nil {
			return nil, err
		}
		r, ok := o.Store.(replication.Reporter)
		if !ok {
			return o, nil
		}
		st, err := r.Replication(ctx)
		if err != nil {
			if n, _ := d.syncReplicas(); n.replicas > 0 || errors.Is(err, replication.ErrUnsatisfiable) {
				_ = o.Close()
				return nil, fmt.Errorf("store %s: %w", d, err)
			}
			st = replication.Status{Mode: replication.Unknown, Detail: err.Error()}
		}
		o.Replication = &st
		return o, nil
	}
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
	s, err := postgres.New(pool, po)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	// Replication first: on a primary whose synchronous standbys are
	// gone, the migrations' commits would wait for them without end.
	o, err := replicated(ctx, d)(&Opened{Store: s, DSN: d, closers: []func(){pool.Close}}, nil)
	if err != nil {
		return nil, err
	}
	if opts.Migrate {
		if err := postgres.Migrate(ctx, pool, po); err != nil {
			_ = o.Close()
			return nil, fmt.Errorf("store %s: migrate: %w", d, err)
		}
	}
	return o, nil
}

// Migrate applies the PostgreSQL migrations of the store dsn names, after
// checking what is really in the database, and reports what it did.
func Migrate(ctx context.Context, dsn string) (postgres.Report, error) {
	rep, err := migrate(ctx, dsn)
	return rep, NewRedactor(dsn).Error(err)
}

// Drop removes the PostgreSQL store that dsn names: its records table,
// pgtx's recovery points beside it, and its migration rows
// (postgres.Drop; force drops records that have not expired too).
func Drop(ctx context.Context, dsn string, force bool) (postgres.DropReport, error) {
	rep, err := drop(ctx, dsn, force)
	return rep, NewRedactor(dsn).Error(err)
}

func drop(ctx context.Context, dsn string, force bool) (postgres.DropReport, error) {
	d, err := Parse(dsn)
	if err != nil {
		return postgres.DropReport{}, err
	}
	if d.Kind != Postgres {
		return postgres.DropReport{}, fmt.Errorf("store %s: %w: only PostgreSQL stores have tables to drop", d, ErrNotPostgres)
	}
	pool, err := pgPool(ctx, d)
	if err != nil {
		return postgres.DropReport{}, err
	}
	defer pool.Close()
	rep, err := postgres.Drop(ctx, pool, d.postgresOptions(), force)
	if err != nil {
		return rep, fmt.Errorf("store %s: %w", d, err)
	}
	return rep, nil
}

func migrate(ctx context.Context, dsn string) (postgres.Report, error) {
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
// two) and its writer waits a moment after each write for more of them
// while several are waiting (idem_flush_delay=100us; 0 turns it off; a
// lone request never waits): one write and one read then carry several,
// on both sides. With rueidis's defaults (two connections, no delay) the
// gateway answered fewer first calls (docs/bench/GATEWAY.md).
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
	s, err := redisstore.NewRueidis(client, d.redisOptions())
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: s, DSN: d, closers: []func(){client.Close}}, nil
}

func (d DSN) redisOptions() redisstore.Options {
	n, _ := d.syncReplicas()
	return redisstore.Options{Prefix: d.Params["prefix"], SyncReplicas: n.replicas, SyncTimeout: n.timeout}
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
	s, err := redisstore.New(client, d.redisOptions())
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
