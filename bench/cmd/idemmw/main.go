// Command idemmw is idem's middleware in process: the trivial handler
// wrapped by idemhttp with the default (IETF) profile, on the store its
// -store DSN names (internal/inproc). With -lean it leaves out what
// gofiber's middleware does not do either (the request fingerprint, the
// callers' tenants, the body's read deadline), so that the two can be
// compared feature for feature.
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only with -pprof

	"github.com/idem-dev/idem/bench/internal/app"
	"github.com/idem-dev/idem/bench/internal/inproc"
	"github.com/idem-dev/idem/internal/gateway/dsn"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18082", "address to listen on")
	storeDSN := flag.String("store", "memory:", "store DSN (memory:, file:DIR, postgres://..., redis://...)")
	pprofAddr := flag.String("pprof", "", "address to serve /debug/pprof on (off when empty)")
	lean := flag.Bool("lean", false, "no fingerprint, no tenants, no body deadline: what gofiber's middleware leaves out")
	flag.Parse()
	if *pprofAddr != "" {
		go func() { log.Println(http.ListenAndServe(*pprofAddr, nil)) }()
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := dsn.Open(context.Background(), *storeDSN, dsn.Options{Logger: quiet, Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	var c app.Counter
	h, closeEngine := inproc.Idem(st, &c, *lean)
	defer closeEngine()
	app.Serve(app.Server(*listen, h))
}
