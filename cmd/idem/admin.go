package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idem-dev/idem/internal/gateway"
	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/internal/gateway/metrics"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/replication"
)

// adminOptions wires the admin listener: readiness (store and upstream),
// the admin page and API over the engine, cleanup and pprof.
func (s *server) adminOptions(st store.Store, met *metrics.Metrics, tracker *gateway.Tracker, upstream *url.URL) gateway.AdminOptions {
	o := gateway.AdminOptions{
		Store:    st, // sealed when a secret is set, so that inspection reads through it
		Scope:    s.proxy.Routes().Scope,
		KeyOf:    s.proxy.Routes().KeyOf,
		Metrics:  met.Handler(),
		Gatherer: met.Registry,
		Token:    s.cfg.AdminToken,
		Draining: &s.draining,
		Upstream: upstreamProbe(upstream, s.cfg.UpstreamReadyCheck()),
		Cleaner:  s.eng,
		Tracker:  tracker,
		Releaser: s.eng,
		Logger:   s.log,
		Redactor: s.eng.Redactor(),
		// Read at start; the admin page shows what a failover would do.
		Replication: s.opened.Replication,
		// The store DSN's password, should an error quote it.
		HideSecrets: dsn.NewRedactor(s.cfg.Store).String,
	}
	met.KeysInProgress(tracker.Held)
	if ec, ok := s.opened.Store.(expiredCounter); ok {
		o.CountExpired = ec.CountExpired
	}
	return o
}

// upstreamProbe returns the readiness check of the upstream: a TCP connect
// to its host, a GET of a path that must answer below 500, or nil (off).
func upstreamProbe(u *url.URL, check string) func(context.Context) error {
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	switch {
	case check == "off":
		return nil
	case check == "tcp":
		return func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", host)
			if err != nil {
				return fmt.Errorf("cannot connect to %s: %w", host, err)
			}
			return c.Close()
		}
	}
	target := u.ResolveReference(&url.URL{Path: check}).String()
	client := &http.Client{Transport: gateway.NewTransport(0), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		res, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("GET %s: %w", check, err)
		}
		res.Body.Close()
		if res.StatusCode >= 500 {
			return fmt.Errorf("GET %s: %s", check, res.Status)
		}
		return nil
	}
}

// logStart says what an operator needs to know at start: which requests
// are protected, whether the admin listener is exposed, and the settings
// given under a former name.
func logStart(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Renamed() {
		log.Warn("idem: config: " + w)
	}
	if len(cfg.Routes) == 0 {
		log.Info("idem: protecting every route: a request with an Idempotency-Key on a method other than GET, HEAD, OPTIONS or TRACE runs once")
	} else {
		pats := make([]string, len(cfg.Routes))
		for i, r := range cfg.Routes {
			pats[i] = r.Match
		}
		log.Info("idem: protecting only the listed routes; every other request passes through unprotected, key or not",
			"routes", strings.Join(pats, "; "))
	}
	if cfg.AdminEnabled() {
		if w := gateway.AdminWarning(cfg.AdminListen, cfg.AdminToken); w != "" {
			log.Warn("idem: " + w)
		}
	}
}

// logReplication says in one line how the store replicates and what a
// failover of it would do to the promise, a warning when it may break it
// (asynchronous replicas without idem_sync_replicas), and exposes it as
// idem_store_replication. st is nil for a store without replicas to tell
// of (memory, file, pebble, S3, DynamoDB).
func logReplication(log *slog.Logger, st *replication.Status, met *metrics.Metrics) {
	if st == nil {
		return
	}
	met.SetReplication(*st)
	attrs := []any{"mode", string(st.Mode), "replicas", st.Replicas, "synchronous", st.Synchronous,
		"sync_replicas", st.SyncReplicas, "detail", st.Detail}
	if st.Warn() {
		log.Warn("idem: store replication: "+st.Promise(), attrs...)
		return
	}
	log.Info("idem: store replication: "+st.Promise(), attrs...)
}

// replicationEvery is how often a running gateway reads again how its
// store replicates.
const replicationEvery = 30 * time.Second

// watchReplication reads how the store replicates every interval while
// the gateway runs and updates idem_store_replication: a standby that went
// away, or a failover manager that turned synchronous replication off
// (Patroni without synchronous_mode_strict), shows there and in a log
// line when it changes. With idem_sync_replicas no longer satisfiable
// every write now fails closed: the line says why. A store that does not
// answer is left to /readyz and the store metrics.
func (s *server) watchReplication(met *metrics.Metrics, interval time.Duration) {
	r, ok := s.opened.Store.(replication.Reporter)
	if !ok || s.opened.Replication == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stopWatch = func() { cancel(); <-done }
	last := *s.opened.Replication
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := r.Replication(rctx)
			rcancel()
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, replication.ErrUnsatisfiable):
				s.log.Error("idem: store replication changed: every write now fails closed until it is back: "+err.Error(),
					"mode", string(st.Mode), "replicas", st.Replicas, "synchronous", st.Synchronous)
			case err != nil:
				continue
			case st.Mode != last.Mode || st.Replicas != last.Replicas || st.Synchronous != last.Synchronous:
				s.log.Info("idem: store replication changed", "from", string(last.Mode), "to", string(st.Mode))
				logReplication(s.log, &st, met)
			}
			met.SetReplication(st)
			last = st
		}
	}()
}

// drain keeps serving for drain_delay while /readyz answers 503, so that
// load balancers take the gateway out of rotation before its listener
// closes.
func (s *server) drain() {
	d := s.cfg.DrainDelayDuration()
	if d <= 0 {
		return
	}
	s.log.Info("idem: draining: /readyz answers 503; the listener closes after drain_delay", "drain_delay", d.String())
	time.Sleep(d)
}
