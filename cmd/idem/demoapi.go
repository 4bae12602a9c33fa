package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/idem-dev/idem/internal/gateway/demoapi"
)

// DemoAPICommand runs the demo payments API alone (hidden; tests run it as
// the gateway's upstream in its own process).
type DemoAPICommand struct{ m *Main }

// Run serves the demo API until ctx is done. Its first line on stdout is
// "demo API listening on http://ADDR", with the port chosen when ADDR ends
// in :0.
func (c *DemoAPICommand) Run(ctx context.Context, args []string) error {
	fs := c.m.flagSet("demo-api", "demo-api [--listen ADDR]")
	listen := fs.String("listen", "127.0.0.1:3000", "`address` to listen on")
	if err := parse(fs, args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: demoapi.New(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(c.m.Stdout, "demo API listening on http://%s\n", ln.Addr())
	return serveUntil(ctx, srv, ln)
}

// serveUntil serves on ln until ctx is done, then shuts down gracefully.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
