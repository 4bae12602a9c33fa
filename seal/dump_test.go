package seal_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
	pebblestore "github.com/idem-dev/idem/store/pebble"
	"github.com/idem-dev/idem/store/postgres"
	redisstore "github.com/idem-dev/idem/store/redis"
	s3store "github.com/idem-dev/idem/store/s3"
)

// backend is a shared store as an operator backs it up: open gives a store
// in a namespace of its own (schema, key prefix, object prefix, directory),
// dump every byte that namespace holds, as a backup would.
type backend struct {
	open func(t *testing.T, ns string) store.Store
	dump func(t *testing.T, ns string) []byte
}

// secrets is what the payments API's client sent and got back, one per
// request, and what must never be readable at rest.
type secrets struct {
	key, body, location, requestID, pathPart, auth string
}

func newSecrets() secrets {
	// Each secret has a random part of its own: were they to share one,
	// Pebble's block compression would turn the repeats into
	// back-references and the plaintext control could not find them.
	r := func() string {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	return secrets{
		key:       "order-key-" + r(),
		body:      "card-4242-" + r(),
		location:  "/v1/charges/ch-" + r(),
		requestID: "req-" + r(),
		pathPart:  "acct-" + r(),
		// alice:hunter2, the credential the issue recovered from a dump.
		auth: "Basic YWxpY2U6aHVudGVyMg==",
	}
}

// needles are the strings a dump must not contain: each secret, and the
// unsalted hashes a dictionary attack would test, each as written and in
// the encodings dumps use (PostgreSQL shows bytea in hex, S3 and JSON use
// base64).
func (s secrets) needles() map[string][]string {
	forms := func(v string) []string {
		f := []string{v, hex.EncodeToString([]byte(v))}
		// Base64 of a longer value holds v's encoding at one of three
		// alignments: encode v after k bytes, keep the characters that
		// depend on v alone.
		for k := range 3 {
			enc := base64.StdEncoding.EncodeToString(append(make([]byte, k), v...))
			f = append(f, enc[(4*k+2)/3:4*((k+len(v))/3)])
		}
		return f
	}
	sum := func(v string) string { h := sha256.Sum256([]byte(v)); return hex.EncodeToString(h[:]) }
	n := map[string][]string{
		"raw key":       forms(s.key),
		"response body": forms(s.body),
		"kept header":   forms(s.location),
		"request ID":    forms(s.requestID),
		"path":          forms(s.pathPart),
		"credential":    append(forms(s.auth), forms("alice:hunter2")...),
	}
	for _, a := range []string{s.auth, strings.ToLower(s.auth), "alice:hunter2"} {
		// The full unsalted SHA-256 and the 128-bit prefix tenant scopes use.
		n["unsalted credential hash"] = append(n["unsalted credential hash"], sum(a), sum(a)[:32])
	}
	return n
}

// leaks returns what of the needles b holds.
func leaks(b []byte, needles map[string][]string) []string {
	var found []string
	for what, forms := range needles {
		for _, f := range forms {
			if bytes.Contains(b, []byte(f)) {
				found = append(found, fmt.Sprintf("%s (%q)", what, f))
			}
		}
	}
	return found
}

// needleSet is the needles of one test, grown by the probe as the engine
// shows what it hands the store.
type needleSet struct {
	mu sync.Mutex
	m  map[string][]string
}

func (n *needleSet) add(what string, forms ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.m[what] = append(n.m[what], forms...)
}

func (n *needleSet) get() map[string][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.m)
}

var hexRun = regexp.MustCompile(`[0-9a-f]{16,}`)

// probe sits between the engine and the seal: it adds to the needles the
// engine's own record identity, the unkeyed hash of scope and key, and
// the tenant's unsalted credential hash inside the scope, however the
// middleware computes it.
type probe struct {
	store.Store
	n *needleSet
}

func (p *probe) Unwrap() store.Store { return p.Store }

func (p *probe) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	p.n.add("unkeyed key hash", req.Record.KeyHash)
	p.n.add("tenant hash", hexRun.FindAllString(req.Record.Scope, -1)...)
	return p.Store.Reserve(ctx, req)
}

// tap is a store between the seal and the backend that fails the test when
// a secret crosses it: what the backend is given, whatever it then does
// with it (compress, encode, replicate).
type tap struct {
	store.Store
	t       *testing.T
	needles *needleSet
}

func (p *tap) Unwrap() store.Store { return p.Store }

func (p *tap) check(op string, r store.Record) {
	b := fmt.Appendf(nil, "%s|%s|%s|%s|%s|%s|%s", r.KeyHash, r.Scope, r.Key, r.Fingerprint, r.Binding, r.RequestID, r.Value)
	if l := leaks(b, p.needles.get()); len(l) > 0 {
		p.t.Errorf("%s hands the backend %v", op, l)
	}
}

func (p *tap) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	p.check("Reserve", req.Record)
	return p.Store.Reserve(ctx, req)
}

func (p *tap) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	p.check("Get", store.Record{Scope: scope, KeyHash: keyHash})
	return p.Store.Get(ctx, scope, keyHash)
}

func (p *tap) Complete(ctx context.Context, c store.Completion) error {
	p.check("Complete", store.Record{Scope: c.Scope, KeyHash: c.KeyHash, Value: c.Value})
	return p.Store.Complete(ctx, c)
}

// serve runs the payments API behind the idem middleware over st and sends
// one charge per entry of replayed, the Idempotent-Replayed header each
// answer must carry. It closes st.
func serve(t *testing.T, st store.Store, s secrets, replayed ...string) {
	t.Helper()
	eng := idem.New(st, idem.Policy{CleanupInterval: -1})
	// The default tenant: a hash of the caller's Authorization header.
	mw, err := idemhttp.New(eng, idemhttp.Options{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", s.location)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q}`, s.body)
	})
	srv := httptest.NewServer(mw(api))
	defer srv.Close()
	for i, want := range replayed {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/"+s.pathPart+"/charges", strings.NewReader(`{"amount":4200}`))
		req.Header.Set("Idempotency-Key", s.key)
		req.Header.Set("Authorization", s.auth)
		req.Header.Set("X-Request-Id", s.requestID)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || !strings.Contains(string(body), s.body) ||
			resp.Header.Get("Location") != s.location || resp.Header.Get("Idempotent-Replayed") != want {
			t.Fatalf("call %d: %d %v %s", i+1, resp.StatusCode, resp.Header, body)
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// testDump is the proof for one backend: in plaintext, the dump shows what
// the client sent and received (so the dump method sees it); sealed, in a
// namespace of its own, it shows none of it, and the record still replays.
func testDump(t *testing.T, b backend) {
	ring := mustRing(t, secretA)
	t.Run("PlaintextControl", func(t *testing.T) {
		s := newSecrets()
		ns := uniqueName("plain")
		needles := &needleSet{m: s.needles()}
		serve(t, &probe{Store: b.open(t, ns), n: needles}, s, "false", "true")
		dump := b.dump(t, ns)
		l := leaks(dump, needles.get())
		t.Logf("the plaintext dump shows %v", l)
		for _, want := range []string{"raw key", "response body", "kept header", "tenant hash"} {
			if !strings.Contains(strings.Join(l, ","), want) {
				t.Errorf("the plaintext dump (%d bytes) does not show the %s: the dump method is blind, or the data is encoded in a way the test does not search", len(dump), want)
			}
		}
	})
	t.Run("Sealed", func(t *testing.T) {
		s := newSecrets()
		ns := uniqueName("sealed")
		needles := &needleSet{m: s.needles()}
		serve(t, &probe{Store: seal.Wrap(&tap{Store: b.open(t, ns), t: t, needles: needles}, ring), n: needles}, s, "false", "true")
		dump := b.dump(t, ns)
		if len(dump) == 0 {
			t.Fatal("empty dump")
		}
		if len(needles.get()["tenant hash"]) == 0 || len(needles.get()["unkeyed key hash"]) == 0 {
			t.Fatal("the probe saw no tenant hash or key hash")
		}
		if l := leaks(dump, needles.get()); len(l) > 0 {
			t.Fatalf("the sealed dump (%d bytes) shows %v", len(dump), l)
		}
		// Rotated, the record still replays from the same namespace.
		serve(t, seal.Wrap(b.open(t, ns), mustRing(t, secretB+","+secretA)), s, "true")
	})
}

func TestDumpPostgres(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	dsn := testenv.Postgres(t)
	schemas := map[string]postgres.Options{}
	var mu sync.Mutex
	testDump(t, backend{
		open: func(t *testing.T, ns string) store.Store {
			mu.Lock()
			defer mu.Unlock()
			if opts, ok := schemas[ns]; ok {
				s, err := postgres.New(pool, opts)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			s := pgStore(t, pool)
			schemas[ns] = s.Options()
			return s
		},
		dump: func(t *testing.T, ns string) []byte {
			out, err := exec.Command("pg_dump", "--data-only", "--schema", schemas[ns].Schema, dsn).CombinedOutput()
			if err != nil {
				t.Fatalf("pg_dump: %v: %s", err, out)
			}
			return out
		},
	})
}

func TestDumpRedis(t *testing.T) {
	t.Parallel()
	client := redisClient(t)
	prefix := func(ns string) string { return "idem-seal-test:" + ns + ":" }
	testDump(t, backend{
		open: func(t *testing.T, ns string) store.Store {
			s, err := redisstore.New(client, redisstore.Options{Prefix: prefix(ns)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				keys, _ := client.Keys(context.Background(), prefix(ns)+"*").Result()
				if len(keys) > 0 {
					client.Del(context.Background(), keys...)
				}
			})
			return s
		},
		dump: func(t *testing.T, ns string) []byte {
			ctx := context.Background()
			keys, err := client.Keys(ctx, prefix(ns)+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			for _, k := range keys {
				d, err := client.Dump(ctx, k).Result()
				if err != nil {
					t.Fatalf("DUMP %s: %v", k, err)
				}
				fmt.Fprintf(&out, "%s\n%s\n", k, d)
				switch typ := client.Type(ctx, k).Val(); typ {
				case "hash":
					for f, v := range client.HGetAll(ctx, k).Val() {
						fmt.Fprintf(&out, "%s=%s\n", f, v)
					}
				case "string":
					fmt.Fprintf(&out, "%s\n", client.Get(ctx, k).Val())
				default:
					t.Fatalf("key %s of type %s: the dump does not read it", k, typ)
				}
			}
			return out.Bytes()
		},
	})
}

func TestDumpS3(t *testing.T) {
	t.Parallel()
	srv := versitygw(t)
	client := srv.client()
	testDump(t, backend{
		open: func(t *testing.T, ns string) store.Store {
			s, err := s3store.New(client, s3store.Options{Bucket: srv.bucket, Prefix: ns})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		dump: func(t *testing.T, ns string) []byte {
			ctx := context.Background()
			var out bytes.Buffer
			p := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: &srv.bucket, Prefix: aws.String(ns + "/")})
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range page.Contents {
					obj, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: &srv.bucket, Key: o.Key})
					if err != nil {
						t.Fatal(err)
					}
					body, err := io.ReadAll(obj.Body)
					obj.Body.Close()
					if err != nil {
						t.Fatal(err)
					}
					// The object's name is in the dump too: it holds the scope.
					fmt.Fprintf(&out, "%s\n%v\n%s\n", aws.ToString(o.Key), obj.Metadata, body)
				}
			}
			return out.Bytes()
		},
	})
}

// The embedded stores are dumped as a backup would copy them: every byte
// of every file in the directory, twice: as the gateway left it, and after
// opening and closing it again. For the file store that is its log,
// uncompressed. For the Pebble store the first copy holds the records in
// the WAL, uncompressed, and the second in an sstable whose blocks Pebble
// compresses (where a repeated substring may become a back-reference, so a
// grep of the sstable alone could miss plaintext): the plaintext control
// passes on the first copy, and whatever Pebble compresses, the tap shows
// that sealed records never hand it a secret to compress.
func TestDumpFile(t *testing.T) {
	t.Parallel()
	testDump(t, dirBackend(t, func(dir string) (store.Store, error) {
		return file.Open(dir, file.Options{Logger: discard()})
	}))
}

func TestDumpPebble(t *testing.T) {
	t.Parallel()
	testDump(t, dirBackend(t, func(dir string) (store.Store, error) {
		return pebblestore.Open(dir, pebblestore.Options{Logger: discard()})
	}))
}

func dirBackend(t *testing.T, open func(dir string) (store.Store, error)) backend {
	root := t.TempDir()
	return backend{
		open: func(t *testing.T, ns string) store.Store {
			s, err := open(filepath.Join(root, ns))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		dump: func(t *testing.T, ns string) []byte {
			dir := filepath.Join(root, ns)
			var out bytes.Buffer
			readAll := func() {
				err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					b, err := os.ReadFile(p)
					out.Write(b)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			readAll()
			s, err := open(dir)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			readAll()
			return out.Bytes()
		},
	}
}
