// Command gwprof is idem's gateway as `idem serve` builds it (default
// configuration: catch-all route, IETF profile, metrics), plus
// net/http/pprof on -pprof, for profiling under the harness's load. It is
// built only by profile.sh: it uses the gateway's internal packages, which
// may change faster than the harness.
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // the profiling endpoints, on the default mux
	"os"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/bench/internal/app"
	"github.com/idem-dev/idem/internal/gateway"
	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/internal/gateway/metrics"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "proxy address")
	upstream := flag.String("upstream", "http://127.0.0.1:18080", "upstream URL")
	storeDSN := flag.String("store", "memory:", "store DSN")
	pprofAddr := flag.String("pprof", "127.0.0.1:18083", "address of /debug/pprof")
	flag.Parse()
	cfg := &config.Config{Listen: *listen, Upstream: *upstream, Store: *storeDSN}
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		log.Fatal(err)
	}
	built, err := cfg.Build()
	if err != nil {
		log.Fatal(err)
	}
	up, err := cfg.UpstreamURL()
	if err != nil {
		log.Fatal(err)
	}
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	st, err := dsn.Open(context.Background(), cfg.Store, dsn.Options{Logger: lg, Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	met := metrics.New()
	eng := idem.New(met.WrapStore(st.Store), built.Policy, idem.WithLogger(lg),
		idem.WithLegacyReads(cfg.LegacyReadsEnabled(st.FramedOnly)))
	built.Options.Logger = lg
	built.Options.Observe = met.Observe
	proxy, err := gateway.New(gateway.Options{
		Upstream: up, Engine: eng, Middleware: built.Options,
		Transport: gateway.NewTransport(time.Duration(cfg.UpstreamTimeout)),
		Logger:    lg, OnUpstreamError: met.UpstreamError,
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() { log.Println(http.ListenAndServe(*pprofAddr, nil)) }()
	app.Serve(&http.Server{Addr: *listen, Handler: proxy, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute})
}
