// Command idemmw is idem's middleware in process: the trivial handler
// wrapped by idemhttp with the default (IETF) profile, on the store its
// -store DSN names.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only with -pprof

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/bench/internal/app"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/dsn"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18082", "address to listen on")
	storeDSN := flag.String("store", "memory:", "store DSN (memory:, file:DIR, postgres://..., redis://...)")
	pprofAddr := flag.String("pprof", "", "address to serve /debug/pprof on (off when empty)")
	flag.Parse()
	if *pprofAddr != "" {
		go func() { log.Println(http.ListenAndServe(*pprofAddr, nil)) }()
	}
	// Replays and conflicts are logged at Info; a benchmark would measure
	// the logger instead of idem.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := dsn.Open(context.Background(), *storeDSN, dsn.Options{Logger: quiet, Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	eng := idem.New(st, idem.Policy{}, idem.WithLogger(quiet))
	defer eng.Close()
	var c app.Counter
	mw := idemhttp.Middleware(eng, idemhttp.Options{
		Routes: []idemhttp.Route{{Pattern: "POST " + app.PathOperation}},
		Logger: quiet,
	})
	app.Serve(app.Server(*listen, mw(app.Handler(&c))))
}
