package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

const (
	gwSecretOld = "an-old-gateway-secret-of-32-bytes"
	gwSecretNew = "a-new-gateway-secret-of-32-bytes!"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dirHolds reports whether any file under dir contains s.
func dirHolds(t *testing.T, dir, s string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if bytes.Contains(b, []byte(s)) {
			found = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// With a secret, the gateway's file store holds neither the key, nor the
// request ID, nor the charge it answered; after a rotation (new secret
// first, old second, from a secret file) the charge replays, `idem inspect`
// reads it through the same secret, and without a secret the gateway warns
// at start that records are stored in plaintext.
func TestGatewaySealsRecords(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	key, reqID := "order-"+randHex(8), "req-"+randHex(8)
	stop := func(g *gw) {
		if err := g.stop(os.Interrupt, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// Control: without a secret the same grep finds the key, and the
	// gateway says so at start.
	plainDir := t.TempDir()
	g := startGateway(t, a.URL, plainDir, "")
	post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", key+"-plain", "X-Request-Id", reqID+"-plain")
	stop(g)
	if !dirHolds(t, plainDir, key+"-plain") {
		t.Fatal("the plaintext control: the grep does not find the key in the file store; it proves nothing")
	}
	if out := g.output(); !strings.Contains(out, "records are stored in plaintext") || !strings.Contains(out, "IDEM_SECRET") {
		t.Errorf("no plaintext warning at start:\n%s", out)
	}

	dir := t.TempDir()
	g = startGateway(t, a.URL, dir, "secret: ["+gwSecretOld+"]\n")
	// Alice's calls are scoped by the default tenant, a hash of her
	// Authorization header.
	first := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", key, "X-Request-Id", reqID, "Authorization", "Bearer tok-alice")
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	chargeID := first.charge(t).ID
	stop(g)
	if out := g.output(); strings.Contains(out, "plaintext") || !strings.Contains(out, "records sealed") {
		t.Errorf("start-up lines with a secret:\n%s", out)
	}
	for what, s := range map[string]string{"key": key, "request ID": reqID, "charge ID": chargeID, "secret": gwSecretOld} {
		if dirHolds(t, dir, s) {
			t.Errorf("the sealed file store holds the %s %q", what, s)
		}
	}

	// Rotated: the new secret first, from a file as Kubernetes mounts it.
	secretFile := filepath.Join(t.TempDir(), "idem-secret")
	if err := writeFile(secretFile, gwSecretNew+"\n"+gwSecretOld+"\n"); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "idem.yaml")
	if err := writeFile(cfg, "secret_file: "+secretFile+"\n"); err != nil {
		t.Fatal(err)
	}
	g = startGateway(t, a.URL, dir, "secret_file: "+secretFile+"\n")
	again := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", key, "Authorization", "bearer  tok-alice")
	if again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body, first.Body) ||
		again.Header.Get("Original-Request-Id") != reqID {
		t.Fatalf("after rotation: %d %v %s", again.Status, again.Header, again.Body)
	}
	stop(g)
	if n := a.stats(t).Executions[key]; n != 1 {
		t.Fatalf("%d executions of %s", n, key)
	}
	alice, _ := http.NewRequest("POST", "/charges", nil)
	alice.Header.Set("Authorization", "Bearer tok-alice")
	scope, _ := idemhttp.TenantFromHeaders("Authorization")(alice)
	out, stderr, err := runIdem(t, "inspect", "--store", "file:"+dir, "--config", cfg, "--scope", scope, "--key", key)
	if err != nil || !strings.Contains(out, key) || !strings.Contains(out, chargeID) {
		t.Fatalf("inspect through the secret: %v\n%s%s", err, out, stderr)
	}
	// A wrong secret is refused at start, without quoting it.
	_, stderr, err = runIdem(t, "serve", "--upstream", a.URL, "--store", "file:"+dir, "--config", writeConfig(t, "secret: [short]\n"))
	if err == nil || !strings.Contains(stderr, "at least 16") || strings.Contains(stderr, "short]") {
		t.Fatalf("a short secret: %v\n%s", err, stderr)
	}
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "idem.yaml")
	if err := writeFile(f, yaml); err != nil {
		t.Fatal(err)
	}
	return f
}

// A header block over max_header_bytes (default 64 KiB) gets 431, in
// problem+json, before it reaches the proxy; one under it passes.
func TestHeaderLimits(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	for _, tc := range []struct {
		yaml      string
		ok, large int
	}{
		{"", 32 << 10, 100 << 10},
		{"max_header_bytes: 8KiB\n", 4 << 10, 16 << 10},
	} {
		g := startGateway(t, a.URL, t.TempDir(), tc.yaml)
		for _, n := range []int{tc.ok, tc.large} {
			r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "order-"+randHex(4), "X-Padding", strings.Repeat("p", n))
			want := http.StatusCreated
			if n == tc.large {
				want = http.StatusRequestHeaderFieldsTooLarge
			}
			if r.Status != want {
				t.Errorf("%q: a %d-byte header: %d, want %d", tc.yaml, n, r.Status, want)
			}
			if want == http.StatusRequestHeaderFieldsTooLarge {
				if p := r.problem(t); p["type"] != idemhttp.ProblemTypeBase+string(idemhttp.KindHeadersTooLarge) {
					t.Errorf("%q: 431 %v", tc.yaml, p)
				}
			}
		}
	}
}

// A client that trickles its headers is cut off after read_header_timeout.
func TestReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "read_header_timeout: 300ms\n")
	c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = bufio.NewReader(c).ReadByte()
	if err == nil {
		t.Log("the server answered before closing (a 408 is fine)")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection was still open after %v", time.Since(start))
	}
}

// Every shared store without a secret gets the plaintext warning at start;
// the memory store, which keeps nothing at rest, does not; with a secret the
// store is sealed and the line names the key ID.
func TestPlaintextWarning(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{dsn.Memory, dsn.File, dsn.Pebble, dsn.Postgres, dsn.Redis, dsn.S3} {
		for _, secret := range []string{"", gwSecretOld} {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			cfg := &config.Config{}
			if secret != "" {
				cfg.Secret = config.StringList{secret}
			}
			st, _, err := sealStore(cfg, &dsn.Opened{Store: memory.New(), DSN: dsn.DSN{Kind: kind}}, log)
			if err != nil {
				t.Fatal(err)
			}
			warned := strings.Contains(logs.String(), "records are stored in plaintext")
			_, sealed := st.(interface{ Unwrap() store.Store })
			switch {
			case secret != "" && (!sealed || warned || !strings.Contains(logs.String(), "key_id=k")):
				t.Errorf("%s with a secret: sealed %v, logs %s", kind, sealed, logs.String())
			case secret == "" && sealed:
				t.Errorf("%s without a secret is sealed", kind)
			case secret == "" && warned != (kind != dsn.Memory):
				t.Errorf("%s without a secret: warned %v; logs %s", kind, warned, logs.String())
			}
		}
	}
}

// The maintenance commands open the store through IDEM_SECRET too: cleanup
// (and its dry run) goes through the seal to the store's own methods.
func TestMaintenanceThroughSecret(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	env := map[string]string{"IDEM_SECRET": gwSecretNew + "," + gwSecretOld}
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	ctx := t.Context()
	if err := m.Run(ctx, []string{"cleanup", "--store", "memory:", "--dry-run"}); err != nil || !strings.Contains(out.String(), "0 expired records") {
		t.Errorf("cleanup --dry-run: %q %v", out.String(), err)
	}
	out.Reset()
	if err := m.Run(ctx, []string{"cleanup", "--store", "memory:"}); err != nil || !strings.Contains(out.String(), "removed 0 expired records") {
		t.Errorf("cleanup: %q %v", out.String(), err)
	}
	env["IDEM_SECRET"] = "short"
	if err := m.Run(ctx, []string{"inspect", "--store", "memory:", "--key", "k"}); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("inspect with a bad secret: %v", err)
	}
}
