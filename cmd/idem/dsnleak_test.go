package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// leakPW is the store password of TestStoreDSNPasswordNeverShown; the test
// server trusts every connection, so any password opens it.
const leakPW = "Hunter2-leak-canary"

// leakToken is the admin token of the gateways of these tests.
const leakToken = "an-admin-token-of-32-bytes-xxxxx"

// forwarder is a TCP relay to a store, which the test cuts to make the
// store fail under a running gateway.
type forwarder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func forward(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	t.Cleanup(f.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return f
}

// cut closes the relay and every connection through it: the store is gone.
func (f *forwarder) cut() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// TestStoreDSNPasswordNeverShown: a gateway whose PostgreSQL DSN carries a
// password (in the user information, and as ?password=) never shows it: not
// in its log lines (the start line and the plaintext warning included, at
// debug level), not in /readyz (with or without the admin token), the admin
// page or the admin API, also once the store is cut off under it and
// every call fails.
func TestStoreDSNPasswordNeverShown(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(migratedSchema(t, "idem_leak"))
	if err != nil {
		t.Fatal(err)
	}
	a := startAPI(t)
	for _, form := range []string{"userinfo", "query"} {
		t.Run(form, func(t *testing.T) {
			f := forward(t, base.Host)
			u := *base
			u.Host = f.ln.Addr().String()
			if form == "userinfo" {
				u.User = url.UserPassword(base.User.Username(), leakPW)
			} else {
				q := u.Query()
				q.Set("password", leakPW)
				u.RawQuery = q.Encode()
			}
			g := startGatewayEnv(t, []string{"IDEM_ADMIN_TOKEN=" + leakToken}, a.URL, "", "",
				"--store", u.String(), "--log-level", "debug")
			var shown []string
			get := func(path, token string) {
				req, _ := http.NewRequest("GET", g.Admin+path, nil)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				res, err := client.Do(req)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				shown = append(shown, "GET "+path+": "+string(b))
			}
			post := func(key string) {
				res, err := client.Post(g.URL+"/charges", "application/json", strings.NewReader(`{"amount": 1}`))
				if err == nil {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					shown = append(shown, "POST: "+string(b))
				}
				req, _ := http.NewRequest("POST", g.URL+"/charges", strings.NewReader(`{"amount": 1}`))
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Content-Type", "application/json")
				if res, err := client.Do(req); err == nil {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					shown = append(shown, "POST keyed: "+string(b))
				}
			}
			admin := func() {
				for _, tok := range []string{"", leakToken} {
					get("/readyz", tok)
				}
				get("/", leakToken)
				get("/api/stats", leakToken)
				get("/api/keys?scope=&key=k1", leakToken)
			}
			post("k1")
			admin()
			f.cut() // the store is gone under the gateway
			post("k2")
			admin()
			if !strings.Contains(shown[len(shown)-5], "store unavailable") {
				t.Errorf("/readyz with the store cut off: %s", shown[len(shown)-5])
			}
			if err := g.stop(syscall.SIGTERM, 20*time.Second); err != nil {
				t.Logf("stop: %v", err)
			}
			lines := g.output()
			if !strings.Contains(lines, `"store":"postgres://`) || !strings.Contains(lines, "xxxxx") {
				t.Errorf("the start line does not show the redacted DSN:\n%s", lines)
			}
			for _, s := range append(shown, lines) {
				if strings.Contains(s, leakPW) {
					t.Errorf("the store password is shown: %s", s)
				}
			}
		})
	}
}

// TestStoreDSNPasswordNotInErrors: every command refusing or failing on a
// store DSN that carries a password, in each form a DSN can hold one,
// says so without the password.
func TestStoreDSNPasswordNotInErrors(t *testing.T) {
	t.Parallel()
	redis := strings.TrimPrefix(testenv.Redis(t), "redis://")
	dsns := []string{
		"host=127.0.0.1 port=5432 user=postgres password=" + leakPW + " dbname=test",
		"postgres://postgres:" + leakPW + "@127.0.0.1:1/test?connect_timeout=2",
		"postgres://127.0.0.1:1/test?user=postgres&password=" + leakPW + "&connect_timeout=2",
		"redis://:" + leakPW + "@" + redis, // a server without a password refuses AUTH
		"redis://" + redis + "?password=" + leakPW,
		"redis::" + leakPW + "@" + redis,
		"s3://bucket/p?endpoint=http://127.0.0.1:1&secret_key=" + leakPW,
	}
	for _, d := range dsns {
		for _, args := range [][]string{
			{"serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--store", d},
			{"inspect", "--store", d, "--key", "k"},
			{"cleanup", "--store", d},
			{"migrate", "--store", d},
		} {
			out, errOut, _ := runIdem(t, args...)
			if strings.Contains(out+errOut, leakPW) {
				t.Errorf("idem %s shows the store password:\n%s%s", args[0], out, errOut)
			}
		}
	}
}
