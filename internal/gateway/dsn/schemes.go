package dsn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
	"github.com/idem-dev/idem/store/memory"
	pebblestore "github.com/idem-dev/idem/store/pebble"
	s3store "github.com/idem-dev/idem/store/s3"
)

// scheme is everything this package knows of one kind of store: the
// parser, the error messages, Usage (idem --help) and Open all read it
// from schemes, so that a kind is described in one place.
type scheme struct {
	kind string
	// names are the DSN schemes that name the kind, lower case.
	names []string
	// short is the form listed when a DSN names no known kind.
	short string
	// example is the form shown when a DSN of the kind is not understood.
	example string
	// usage and help are the kind's line in Usage: the form and what it is.
	usage, help string
	// params are the idem_ parameters the kind takes, without the prefix,
	// in the order the errors list them. sync_replicas and sync_timeout
	// are read together (DSN.syncReplicas); the others by the opener.
	params []string
	// opaque parses a DSN that is not a URL with a host (memory:, file:,
	// pebble:, dynamodb://, which has its own parser); rest is what
	// follows the scheme's colon. nil means a URL, read by parseURL.
	opaque func(d DSN, rest string) (DSN, error)
	// host checks the host of a URL DSN (parseURL).
	host func(u *url.URL) error
	// driverStrict says the driver refuses its own empty parameters
	// (pgx), so parseURL need not.
	driverStrict bool
	// driver checks the URL, idem_ parameters removed, as the driver
	// will read it, and returns DSN.URL. nil means urlString(u).
	driver func(dsn string, u *url.URL) (string, error)
	open   func(ctx context.Context, d DSN, opts Options) (*Opened, error)
}

var syncParams = []string{"sync_replicas", "sync_timeout"}

// The parameters and examples that functions of the table read too.
var redisIdemParams = append([]string{"prefix", "flush_delay", "connections"}, syncParams...)

const (
	postgresExample = "postgres://USER:PASSWORD@HOST:5432/DB"
	s3Example       = "s3://BUCKET/PREFIX?endpoint=URL"
)

// schemes are the kinds of store, in the order they are listed.
var schemes = []scheme{
	{kind: Memory, names: []string{"memory"}, short: "memory:",
		usage: "memory:", help: "in-process, lost at exit (tests, the demo)",
		opaque: parseMemory, open: openMemory},
	{kind: File, names: []string{"file"}, short: "file:PATH",
		usage: "file:PATH", help: "embedded, one process (default file:./idem-data; run from /,\nas systemd does: $STATE_DIRECTORY/idem-data or /var/lib/idem/idem-data)",
		opaque: parseDir, open: openFile},
	{kind: Pebble, names: []string{"pebble"}, short: "pebble:PATH",
		usage: "pebble:PATH", help: "embedded on Pebble, one process",
		opaque: parseDir, open: openPebble},
	{kind: Postgres, names: []string{"postgres", "postgresql"}, short: "postgres://HOST/DB",
		example: postgresExample,
		usage:   "postgres://USER@HOST:PORT/DB", help: "PostgreSQL (idem migrate creates the table)",
		params: append([]string{"schema", "table"}, syncParams...),
		host:   checkPostgresHost, driverStrict: true, open: openPostgres},
	{kind: Redis, names: []string{"redis", "rediss"}, short: "redis://HOST:PORT",
		example: "redis://HOST:6379/0",
		usage:   "redis://HOST:PORT/DB", help: "one Redis",
		params: redisIdemParams,
		host:   checkRedisHost, driver: redisDriver,
		open: func(ctx context.Context, d DSN, _ Options) (*Opened, error) {
			return replicated(ctx, d)(openRedis(ctx, d))
		}},
	{kind: RedisCluster, names: []string{"redis-cluster", "rediss-cluster"}, short: "redis-cluster://HOST:PORT?addr=HOST:PORT",
		example: "redis-cluster://HOST:PORT?addr=HOST:PORT",
		usage:   "redis-cluster://HOST:PORT?addr=HOST:PORT", help: "a Redis Cluster (any of its nodes; addr= adds seeds)",
		params: append([]string{"prefix"}, syncParams...),
		host:   checkClusterHost, driver: clusterDriver,
		open: func(ctx context.Context, d DSN, _ Options) (*Opened, error) {
			return replicated(ctx, d)(openRedisCluster(ctx, d))
		}},
	{kind: S3, names: []string{"s3"}, short: "s3://BUCKET/PREFIX?endpoint=URL",
		example: s3Example,
		usage:   "s3://BUCKET/PREFIX?endpoint=URL", help: "S3 or an S3-compatible server with conditional writes",
		host: checkBucket, driver: s3Driver,
		open: func(ctx context.Context, d DSN, _ Options) (*Opened, error) { return openS3(ctx, d) }},
	{kind: DynamoDB, names: []string{"dynamodb"}, short: "dynamodb://TABLE?region=REGION",
		example: "dynamodb://TABLE?region=REGION",
		usage:   "dynamodb://TABLE?region=REGION", help: "DynamoDB (endpoint=URL for dynalite)",
		opaque: parseDynamoDSN, open: openDynamoDB},
}

// schemeOf returns the scheme a DSN's scheme name names.
func schemeOf(name string) (*scheme, bool) {
	name = strings.ToLower(name)
	for i := range schemes {
		for _, n := range schemes[i].names {
			if n == name {
				return &schemes[i], true
			}
		}
	}
	return nil, false
}

// kindOf returns the scheme of a kind.
func kindOf(kind string) *scheme {
	for i := range schemes {
		if schemes[i].kind == kind {
			return &schemes[i]
		}
	}
	return nil
}

// Usage lists the store DSNs, one kind a line (its form, then what it
// is), each line starting with indent, for idem --help.
func Usage(indent string) string {
	width := 0
	for _, s := range schemes {
		width = max(width, len(s.usage))
	}
	var b strings.Builder
	for i, s := range schemes {
		if i > 0 {
			b.WriteByte('\n')
		}
		for j, line := range strings.Split(s.help, "\n") {
			form := ""
			if j == 0 {
				form = s.usage
			}
			if j > 0 {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "%s%-*s  %s", indent, width, form, line)
		}
	}
	return b.String()
}

// wantKinds lists the forms of every kind, for a DSN that names none.
func wantKinds() string {
	forms := make([]string, len(schemes))
	for i, s := range schemes {
		forms[i] = s.short
	}
	return "want " + strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}

func parseMemory(d DSN, rest string) (DSN, error) {
	if rest != "" && rest != "//" {
		return d, fmt.Errorf("store %q: %w: memory takes no path (write memory:)", d.raw, ErrMalformed)
	}
	return d, nil
}

func parseDynamoDSN(d DSN, _ string) (DSN, error) {
	if _, err := ParseDynamoDB(d.raw); err != nil {
		return d, badURL(d.raw, err)
	}
	d.URL = d.raw // as written: ParseDynamoDB reads it again
	return d, nil
}

// badURL is a DSN refused for err's reason.
func badURL(dsn string, err error) error {
	return fmt.Errorf("store %q: %w: %v", Redact(dsn), ErrMalformed, err)
}

func s3Driver(dsn string, _ *url.URL) (string, error) {
	if _, err := s3store.ParseDSN(dsn); err != nil {
		return "", fmt.Errorf("store %q: %w", Redact(dsn), err)
	}
	return dsn, nil // as written: s3store reads it again
}

func redisDriver(dsn string, u *url.URL) (string, error) {
	if err := checkRedisParams(u); err != nil {
		return "", badURL(dsn, err)
	}
	if _, err := rueidis.ParseURL(u.String()); err != nil {
		return "", badURL(dsn, err)
	}
	return urlString(u), nil
}

func clusterDriver(dsn string, u *url.URL) (string, error) {
	if u.Path != "" && u.Path != "/" {
		return "", malformed(Redact(dsn), fmt.Sprintf("a Redis Cluster has no databases, so the path %q means nothing; remove it", u.Path))
	}
	// go-redis's cluster URL has the plain redis schemes.
	u.Scheme = strings.TrimSuffix(strings.ToLower(u.Scheme), "-cluster")
	if _, err := redis.ParseClusterURL(u.String()); err != nil {
		return "", badURL(dsn, err)
	}
	return urlString(u), nil
}

// urlString writes u for a driver.
func urlString(u *url.URL) string {
	s := u.String()
	if rest, ok := strings.CutPrefix(s, u.Scheme+":"); ok && !strings.HasPrefix(rest, "//") {
		// url.URL writes postgres://?host=... without its //, which pgx
		// then no longer reads as a URL.
		s = u.Scheme + "://" + rest
	}
	return s
}

// checkPostgresHost refuses postgres:// alone and a port that is not one.
// postgres:///DB is libpq's form for the local socket (or PGHOST).
func checkPostgresHost(u *url.URL) error {
	if u.Host == "" && strings.Trim(u.Path, "/") == "" && u.RawQuery == "" {
		return fmt.Errorf("it names no host and no database; write %s", postgresExample)
	}
	for _, h := range strings.Split(u.Host, ",") { // libpq's several hosts
		if err := checkPort(h); err != nil {
			return err
		}
	}
	return nil
}

// checkRedisHost refuses a URL without a host, which the client would
// read as localhost:6379, or with a port that is not one.
func checkRedisHost(u *url.URL) error {
	if u.Hostname() == "" {
		return fmt.Errorf("it names no host, which the client would read as localhost:6379; write %s://%s%s", strings.ToLower(u.Scheme), localHost(u), u.Path)
	}
	return checkPort(u.Host)
}

func checkClusterHost(u *url.URL) error {
	if u.Hostname() == "" {
		return fmt.Errorf("it names no node; write %s://%s", strings.ToLower(u.Scheme), localHost(u)+"?addr=HOST:PORT")
	}
	return checkPort(u.Host)
}

// checkBucket refuses an S3 DSN without a bucket, or with a port, which
// belongs to the server's ?endpoint=.
func checkBucket(u *url.URL) error {
	if u.Hostname() == "" {
		return fmt.Errorf("it names no bucket; write %s", s3Example)
	}
	if u.Port() != "" {
		return fmt.Errorf("a bucket has no port: the S3 server goes in ?endpoint=, e.g. s3://%s%s?endpoint=http://HOST:%s", u.Hostname(), u.Path, u.Port())
	}
	return nil
}

// localHost is the host a URL without one is shown with in its fix.
func localHost(u *url.URL) string {
	if u.Port() != "" {
		return "127.0.0.1:" + u.Port()
	}
	return "127.0.0.1"
}

func openMemory(_ context.Context, d DSN, _ Options) (*Opened, error) {
	// A memory store is new at every start, and this process alone writes
	// it: it holds no record of an earlier version, and says so.
	s := memory.New()
	return &Opened{Store: s, DSN: d, FramedOnly: store.HoldsNoLegacyRecords(s)}, nil
}

func openFile(ctx context.Context, d DSN, opts Options) (*Opened, error) {
	fresh := dirFresh(d.Path)
	s, err := file.Open(d.Path, file.Options{Logger: opts.Logger, Headroom: opts.Headroom, OneSync: true})
	if err != nil {
		if errors.Is(err, file.ErrLocked) {
			return nil, fmt.Errorf("store %s: %w: an idem gateway is probably running on it; work through the gateway instead (--admin http://ITS_ADMIN_LISTEN with its admin_token), or stop it first", d, err)
		}
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: s, DSN: d, FramedOnly: framedOnly(ctx, s, fresh)}, nil
}

func openPebble(ctx context.Context, d DSN, opts Options) (*Opened, error) {
	fresh := dirFresh(d.Path)
	s, err := pebblestore.Open(d.Path, pebblestore.Options{Logger: opts.Logger, Headroom: opts.Headroom, OneSync: true})
	if err != nil {
		if errors.Is(err, pebblestore.ErrLocked) {
			return nil, fmt.Errorf("store %s: %w (is an idem gateway running on it? stop it first, or use its admin listener)", d, err)
		}
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: s, DSN: d, FramedOnly: framedOnly(ctx, s, fresh)}, nil
}
