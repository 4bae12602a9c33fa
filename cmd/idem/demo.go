package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"text/template"
	"time"

	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/demoapi"
)

// DemoCommand runs the demo payments API with the gateway in front of it,
// on the embedded store, and prints curl commands to try.
type DemoCommand struct{ m *Main }

// Run starts both servers and waits for ctx (Ctrl-C).
func (c *DemoCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.flagSet("demo", "demo [--listen ADDR] [--api-listen ADDR] [--admin-listen ADDR] [--data DIR]")
	listen := fs.String("listen", "127.0.0.1:8080", "gateway `address`")
	apiListen := fs.String("api-listen", "127.0.0.1:3000", "demo API `address`")
	adminListen := fs.String("admin-listen", "127.0.0.1:9090", "admin `address` (/metrics, /healthz)")
	data := fs.String("data", "", "store `directory`; default a temporary one, removed at exit")
	logLevel := fs.String("log-level", "warn", "gateway log `level`")
	if err := parse(fs, args); err != nil {
		return err
	}
	dir := *data
	if dir == "" {
		d, err := os.MkdirTemp("", "idem-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}

	apiLn, err := net.Listen("tcp", *apiListen)
	if err != nil {
		return fmt.Errorf("demo API: %w (choose another address with --api-listen)", err)
	}
	api := &http.Server{Handler: demoapi.New(), ReadHeaderTimeout: 10 * time.Second}
	apiDone := make(chan error, 1)
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer func() { stopAPI(); <-apiDone }()
	go func() { apiDone <- serveUntil(apiCtx, api, apiLn) }()

	// The demo's admin page gets a token of its own, printed below.
	tok := make([]byte, 18) // 24 characters: admin tokens under 16 bytes are refused
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	cfg := &config.Config{
		Listen:      *listen,
		Upstream:    "http://" + apiLn.Addr().String(),
		Store:       "file:" + dir,
		AdminListen: *adminListen,
		AdminToken:  base64.RawURLEncoding.EncodeToString(tok),
		LogLevel:    *logLevel,
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := newLogger(c.m.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	s, err := startServer(ctx, cfg, log, c.m.Getenv)
	if err != nil {
		return fmt.Errorf("%w (choose other addresses with --listen and --admin-listen)", err)
	}
	err = demoText.Execute(c.m.Stdout, map[string]string{
		"GW": "http://" + s.Addr(), "API": "http://" + apiLn.Addr().String(),
		"Admin": "http://" + s.AdminAddr(), "Store": cfg.Store, "Token": cfg.AdminToken,
	})
	if err != nil {
		s.shutdown()
		return err
	}
	return s.serve(ctx)
}

var demoText = template.Must(template.New("demo").Funcs(template.FuncMap{"trim": strings.TrimSpace}).Parse(`
idem demo
  payments API (no idempotency of its own)  {{.API}}
  idem gateway in front of it               {{.GW}}   (store {{.Store}})
  metrics and health                        {{.Admin}}/metrics  {{.Admin}}/readyz
  admin page (live numbers, key inspector)  {{.Admin}}/   token {{.Token}}

Try these in another terminal.

1. A charge, then its retry: the retry is replayed (Idempotent-Replayed: true,
   same charge id, Original-Request-Id), not charged again.

   curl -i -X POST {{.GW}}/charges -H 'Authorization: Bearer sk_demo' -H 'Idempotency-Key: order-1' -H 'Content-Type: application/json' -d '{"amount": 1000, "currency": "eur"}'
   curl -i -X POST {{.GW}}/charges -H 'Authorization: Bearer sk_demo' -H 'Idempotency-Key: order-1' -H 'Content-Type: application/json' -d '{"currency":"eur","amount":1000}'

2. The same key with another request is refused: 422, conflict_type payload_mismatch.
   Another caller's order-1 is its own (it runs); a keyed request without
   credentials gets 401 tenant_required.

   curl -i -X POST {{.GW}}/charges -H 'Authorization: Bearer sk_demo' -H 'Idempotency-Key: order-1' -H 'Content-Type: application/json' -d '{"amount": 9999, "currency": "eur"}'
   curl -i -X POST {{.GW}}/charges -H 'Authorization: Bearer sk_other' -H 'Idempotency-Key: order-1' -H 'Content-Type: application/json' -d '{"amount": 1000, "currency": "eur"}'
   curl -i -X POST {{.GW}}/charges -H 'Idempotency-Key: order-1' -H 'Content-Type: application/json' -d '{"amount": 1000, "currency": "eur"}'

3. A race: 20 parallel requests with one key (the API takes 500 ms). One runs,
   the others get 409 in_progress; the API counts one execution.

   (for i in $(seq 20); do curl -s -o /dev/null -w '%{http_code}\n' -X POST '{{.GW}}/charges?delay=500ms' -H 'Authorization: Bearer sk_demo' -H 'Idempotency-Key: race-1' -H 'Content-Type: application/json' -d '{"amount": 500, "currency": "eur"}' & done; wait) | sort | uniq -c
   curl -s {{.GW}}/stats

4. The same retry straight to the API, without idem, charges twice:

   for i in 1 2; do curl -s -X POST {{.API}}/charges -H 'Idempotency-Key: order-2' -H 'Content-Type: application/json' -d '{"amount": 700, "currency": "eur"}'; done
   curl -s {{.API}}/stats

5. A failure (the API answers 500) is not recorded: each retry runs again
   (/stats shows order-3 twice). A 409 would be recorded and replayed.

   for i in 1 2; do curl -s -X POST '{{.GW}}/charges?status=500' -H 'Authorization: Bearer sk_demo' -H 'Idempotency-Key: order-3' -H 'Content-Type: application/json' -d '{"amount": 1}'; done
   curl -s {{.GW}}/stats

6. What the gateway counted:

   curl -s {{.Admin}}/metrics | grep '^idem_'

Press Ctrl-C to stop.
`))
