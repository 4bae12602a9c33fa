package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/gateway"
	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/internal/gateway/metrics"
	"github.com/idem-dev/idem/internal/gateway/tracing"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
)

// ServeCommand runs the gateway.
type ServeCommand struct{ m *Main }

// Run parses flags, loads the configuration and serves until ctx is done.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	cfg, err := c.loadConfig(args)
	if err != nil {
		return err
	}
	log, err := newLogger(c.m.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	// No log line shows the store DSN's secrets, whoever logs them (the
	// start line, a driver's error, the HTTP server's).
	c.m.redactor = dsn.NewRedactor(cfg.Store)
	log = slog.New(c.m.redactor.Handler(log.Handler()))
	if c.m.Getenv("GOGC") == "" {
		// A gateway's live heap is small and its garbage is per request:
		// collecting less often than Go's default gives more first calls
		// per second (docs/bench/GATEWAY.md). GOGC overrides it.
		debug.SetGCPercent(400)
	}
	s, err := startServer(ctx, cfg, log, c.m.Getenv)
	if err != nil {
		return err
	}
	return s.serve(ctx)
}

// loadConfig reads the file (--config, else IDEM_CONFIG), then applies the
// IDEM_* variables, then the flags: flags win over the environment, which
// wins over the file.
func (c *ServeCommand) loadConfig(args []string) (*config.Config, error) {
	fs := c.m.flagSet("serve", "serve [--config FILE] [--listen ADDR] [--upstream URL] [--store DSN] [flags]")
	path := fs.String("config", "", "YAML configuration `file` (default $IDEM_CONFIG)")
	fs.String("listen", "", "proxy `address` (default "+config.DefaultListen+")")
	fs.String("upstream", "", "upstream `URL`, e.g. http://127.0.0.1:3000")
	fs.String("store", "", "store `DSN`: memory:, file:PATH, postgres://..., redis://..., redis-cluster://..., s3://...\n(default "+config.DefaultStore+"; $STATE_DIRECTORY/idem-data or /var/lib/idem/idem-data when run from /)")
	fs.String("admin-listen", "", "admin `address` for /healthz, /readyz, /metrics and the admin page; off disables (default "+config.DefaultAdminListen+")")
	fs.String("drain-delay", "", "on a stop signal, keep serving this `duration` while /readyz answers 503 (default 0)")
	fs.String("log-format", "", "log `format`: text or json")
	fs.String("log-level", "", "log `level`: debug, info, warn, error")
	migrate := fs.String("migrate", "", "run PostgreSQL migrations at start-up: true or false (default true)")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if *path == "" {
		*path = c.m.Getenv("IDEM_CONFIG")
	}
	cfg := &config.Config{}
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			return nil, err
		}
	}
	cfg.ApplyEnv(c.m.Getenv)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, dst := range map[string]*string{
		"listen": &cfg.Listen, "upstream": &cfg.Upstream, "store": &cfg.Store,
		"admin-listen": &cfg.AdminListen, "log-format": &cfg.LogFormat, "log-level": &cfg.LogLevel,
	} {
		if set[name] {
			*dst = fs.Lookup(name).Value.String()
		}
	}
	if set["drain-delay"] {
		d, err := config.ParseDuration(fs.Lookup("drain-delay").Value.String())
		if err != nil {
			return nil, fmt.Errorf("--drain-delay: %v", err)
		}
		cfg.DrainDelay = config.Duration(d)
	}
	if cfg.Store == "" {
		cfg.Store = c.m.defaultStore()
	}
	if set["migrate"] {
		v, err := strconv.ParseBool(*migrate)
		if err != nil {
			return nil, fmt.Errorf("--migrate %q: want true or false", *migrate)
		}
		cfg.Migrate = &v
	}
	if err := cfg.Validate(); err != nil {
		if *path != "" {
			return nil, fmt.Errorf("invalid configuration (%s):\n%w", *path, err)
		}
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	if _, err := dsn.Parse(cfg.Store); err != nil {
		return nil, err
	}
	return cfg, nil
}

// server is a running gateway: proxy and admin listeners over one store.
type server struct {
	cfg      *config.Config
	log      *slog.Logger
	opened   *dsn.Opened
	eng      *idem.Engine
	proxy    *gateway.Proxy
	http     *http.Server
	admin    *http.Server
	ln       net.Listener
	adminLn  net.Listener
	draining atomic.Bool
	errc     chan error
	fresh    freshConns
	tracing  *tracing.Setup
	// stopWatch stops watchReplication and waits for it; nil if none.
	stopWatch func()
}

// freshConns tracks connections on which no request has arrived yet.
// http.Server.Shutdown waits up to 5 s for them, as they may be about to
// send one; clients open them ahead of need (Go's Transport when it
// races dials, browsers), so the gateway closes them itself while draining.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]time.Time // guarded by mu
}

func (f *freshConns) track(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st == http.StateNew {
		if f.conns == nil {
			f.conns = map[net.Conn]time.Time{}
		}
		f.conns[c] = time.Now()
		return
	}
	delete(f.conns, c)
}

// closeOlder closes the fresh connections accepted more than age ago.
func (f *freshConns) closeOlder(age time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c, t := range f.conns {
		if time.Since(t) > age {
			c.Close()
			delete(f.conns, c)
		}
	}
}

// startServer opens the store, builds the handlers and starts listening.
// The listeners are open when it returns. getenv reads the OTEL_* variables
// that configure tracing.
func startServer(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string) (_ *server, err error) {
	built, err := cfg.Build()
	if err != nil {
		return nil, err
	}
	upstream, err := cfg.UpstreamURL()
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, log: log, errc: make(chan error, 2)}
	defer func() {
		if err != nil {
			for _, l := range []net.Listener{s.ln, s.adminLn} {
				if l != nil {
					l.Close()
				}
			}
			s.closeAll()
		}
	}()
	if s.tracing, err = startTracing(ctx, getenv, log); err != nil {
		return nil, err
	}
	s.opened, err = dsn.Open(ctx, cfg.Store, dsn.Options{Logger: log, Migrate: cfg.MigrateEnabled(),
		Headroom: storeHeadroom(built.Options.MaxResponseBytes)})
	if err != nil {
		return nil, err
	}
	st, ring, err := sealStore(cfg, s.opened, log)
	if err != nil {
		return nil, err
	}
	engStore := st // the admin API's reads are not traced
	if tp := s.tracing.TracerProvider; tp != nil {
		engStore = tracing.WrapStore(st, tp)
	}
	met := metrics.New(built.Patterns()...) // every route's series exists from the start
	tracker := &gateway.Tracker{}
	redact := printed(cfg, ring, log)
	s.eng = idem.New(tracker.Wrap(met.WrapStore(engStore)), built.Policy, idem.WithLogger(log), idem.WithOnFreed(met.ReservationFreed),
		idem.WithOnRecordLost(met.RecordLost), idem.WithRedactor(redact), idem.WithLegacyReads(cfg.LegacyReadsEnabled(s.opened.FramedOnly)))
	built.Options.Logger = log
	built.Options.Observe = met.Observe
	s.proxy, err = gateway.New(gateway.Options{
		Upstream:         upstream,
		Engine:           s.eng,
		Middleware:       built.Options,
		Transport:        gateway.NewTransport(time.Duration(cfg.UpstreamDeadline)),
		UpstreamDeadline: time.Duration(cfg.UpstreamDeadline),
		Logger:           log,
		OnUpstreamError:  met.UpstreamError,
		TracerProvider:   s.tracing.TracerProvider,
		Propagators:      s.tracing.Propagators,
	})
	if err != nil {
		return nil, err
	}
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	// A request whose header block is larger than max_header_bytes gets
	// 431 from net/http before it reaches the proxy, and one that is not
	// valid HTTP a 400, both in problem+json (idemhttp.ProblemListener);
	// one that trickles its headers is cut off after read_header_timeout.
	s.http = &http.Server{Handler: s.proxy, ReadHeaderTimeout: cfg.HeaderTimeout(), MaxHeaderBytes: cfg.HeaderLimit(),
		IdleTimeout: 2 * time.Minute, ErrorLog: errLog, ConnState: s.fresh.track}
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if cfg.AdminEnabled() {
		s.admin = &http.Server{Handler: gateway.Admin(s.adminOptions(st, met, tracker, upstream)),
			ReadHeaderTimeout: cfg.HeaderTimeout(), MaxHeaderBytes: cfg.HeaderLimit(), ErrorLog: errLog}
		if s.adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			return nil, fmt.Errorf("admin_listen: %w", err)
		}
		go func() { s.errc <- fmt.Errorf("admin listener: %w", s.admin.Serve(idemhttp.ProblemListener(s.adminLn))) }()
	}
	go func() { s.errc <- s.http.Serve(idemhttp.ProblemListener(s.ln)) }()
	attrs := []any{"addr", s.ln.Addr().String(), "upstream", upstream.Redacted(), "store", s.opened.DSN.String()}
	if s.adminLn != nil {
		attrs = append(attrs, "admin_addr", s.adminLn.Addr().String())
	}
	logStart(log, cfg)
	logReplication(log, s.opened.Replication, met)
	s.watchReplication(met, replicationEvery)
	log.Info("idem gateway listening", attrs...)
	if built.Options.SharedAnonymousScope {
		log.Warn("idem: tenants: keyed requests without credentials share one scope (anonymous: shared): any two such clients sending one key get one outcome", "source", built.TenantSource)
	} else {
		log.Info("idem: tenants", "source", built.TenantSource)
	}
	if cfg.LegacyReadsEnabled(s.opened.FramedOnly) {
		log.Info("idem: legacy reads on: a first call whose scope holds ':' or '%' also looks for its record under the identity earlier versions gave it; set legacy_reads: false once one TTL has passed since the last earlier gateway stopped")
	} else if cfg.LegacyReads == nil {
		log.Info("idem: legacy reads off: this version created the store, which holds no record named as earlier versions named them")
	}
	return s, nil
}

// Addr is the proxy's address.
func (s *server) Addr() string { return s.ln.Addr().String() }

// AdminAddr is the admin listener's address, or "".
func (s *server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// serve waits for ctx (a signal) or a listener failure, then shuts down.
func (s *server) serve(ctx context.Context) error {
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-s.errc:
	}
	err := s.shutdown()
	if failed != nil && !errors.Is(failed, http.ErrServerClosed) {
		return errors.Join(failed, err)
	}
	return err
}

// shutdown stops accepting, lets in-flight requests finish and record their
// outcomes (up to shutdown_timeout), and only then closes the store.
func (s *server) shutdown() error {
	s.draining.Store(true)
	s.drain()
	timeout := time.Duration(s.cfg.ShutdownTimeout)
	s.log.Info("idem gateway shutting down", "timeout", timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	stopSweep := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSweep:
				return
			case <-t.C:
				s.fresh.closeOlder(250 * time.Millisecond)
			}
		}
	}()
	err := s.http.Shutdown(ctx)
	close(stopSweep)
	if err != nil {
		s.log.Warn("idem: in-flight requests did not finish in time; closing connections", "err", err)
		s.http.Close()
	}
	if s.proxy.Wait(ctx) != nil {
		// Upstream calls still running past shutdown_timeout (some detached
		// from clients answered 504) are cut off: their keys are recorded
		// as outcome unknown before the store closes, never left in
		// progress for another gateway to run again.
		s.proxy.Abort()
	}
	// Keyed requests run detached from their connections: give them a
	// little more time to record their outcomes.
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.proxy.Wait(wctx); err != nil {
		errs = append(errs, errors.New("requests still running at exit: their keys stay in progress until their lease ends"))
	}
	wcancel()
	if s.admin != nil {
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		if err := s.admin.Shutdown(actx); err != nil {
			s.admin.Close()
		}
		acancel()
	}
	s.closeAll()
	s.log.Info("idem gateway stopped")
	return errors.Join(errs...)
}

func (s *server) closeAll() {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	if s.eng != nil {
		s.eng.Close()
	}
	if s.opened != nil {
		if err := s.opened.Close(); err != nil {
			s.log.Warn("idem: closing the store", "err", err)
		}
		s.opened = nil
	}
	// Last: the spans of the requests that just finished are sent now.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tracing.Shutdown(ctx); err != nil {
		s.log.Warn("idem: sending the last spans", "err", err)
	}
}

// startTracing sets tracing up from the OTEL_* variables; see package
// internal/gateway/tracing. Its own errors (a collector that cannot be reached)
// are logged, never fatal.
func startTracing(ctx context.Context, getenv func(string) string, log *slog.Logger) (*tracing.Setup, error) {
	t, err := tracing.FromEnv(ctx, getenv, version())
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if t.TracerProvider == nil {
		log.Debug("idem: tracing off (set OTEL_EXPORTER_OTLP_ENDPOINT to send traces)")
		return t, nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("idem: tracing", "err", err) }))
	log.Info("idem: tracing", "endpoint", t.Endpoint, "service", t.Service, "sampler", t.Sampler)
	return t, nil
}

// sealStore wraps the opened store with the configured secret, or says at
// start that a shared store keeps records in plaintext.
// storeHeadroom is the room an embedded store (file:, pebble:) wants free
// before it takes a new key, so that no key runs upstream without room
// for its outcome: a response of max_response_bytes (0 means the
// middleware's default, idemhttp.Options.MaxResponseBytes) and what a
// record holds besides (replayed headers, the request's fields, the frame).
func storeHeadroom(maxResponseBytes int) int64 {
	if maxResponseBytes <= 0 {
		maxResponseBytes = 4 << 20
	}
	return int64(maxResponseBytes) + 64<<10
}

func sealStore(cfg *config.Config, opened *dsn.Opened, log *slog.Logger) (store.Store, *seal.Keyring, error) {
	ring, err := cfg.Keyring()
	if err != nil {
		return nil, nil, err
	}
	if ring == nil {
		if opened.DSN.Kind != dsn.Memory {
			log.Warn("idem: records are stored in plaintext: keys, responses and replayed headers are readable in a dump or backup of the "+opened.DSN.Kind+
				" store; set IDEM_SECRET (or secret: / secret_file: in the config) to a random secret, e.g. from `openssl rand -base64 32`, to seal them",
				"store", opened.DSN.String())
		}
		return opened.Store, nil, nil
	}
	ids := ring.IDs()
	log.Info("idem: records sealed (AES-256-GCM, keyed hashes)", "key_id", ids[0], "also_opens", strings.Join(ids[1:], ","))
	return seal.Wrap(opened.Store, ring), ring, nil
}

// printed is how logs, traces and the admin page print scopes, keys and
// tenants: HMACs under the secret's print key (seal.Keyring.PrintMAC), or,
// without a secret, unkeyed hashes, which the start-up log says can be
// checked against guesses.
func printed(cfg *config.Config, ring *seal.Keyring, log *slog.Logger) idem.Redactor {
	r := idem.Redactor{Raw: cfg.LogRawKeys}
	if ring != nil {
		r.MAC = ring.PrintMAC
	} else {
		log.Warn("idem: no secret: the scope and key hashes in logs, traces and the admin page are unkeyed SHA-256, " +
			"so anyone who reads them can check a guessed tenant, credential or key against them; " +
			"set IDEM_SECRET (or secret: / secret_file: in the config) to key them")
	}
	if r.Raw {
		log.Warn("idem: log_raw_keys: debug lines carry raw scopes (tenants) and idempotency keys; keep these logs on this machine")
	}
	return r
}
