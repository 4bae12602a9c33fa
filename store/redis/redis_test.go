package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// newClient connects to the test server. ContextTimeoutEnabled is the
// configuration the package recommends; tests that want go-redis's default
// pass mod.
func newClient(t testing.TB, mod func(*redis.Options)) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	if mod != nil {
		mod(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// uniquePrefix isolates a test's keys from every other test and process.
func uniquePrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "idemtest:" + hex.EncodeToString(b) + ":"
}

// keysUnder lists the key names under prefix, on every primary of a cluster.
func keysUnder(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("keysUnder: client %T", c)
	}
	if err != nil {
		t.Fatalf("scan %s*: %v", prefix, err)
	}
	return keys
}

// dropPrefix deletes what a test left under prefix, one key at a time so
// that it works on a cluster too.
func dropPrefix(t testing.TB, c redis.UniversalClient, prefix string) {
	t.Helper()
	for _, k := range keysUnder(t, c, prefix) {
		if err := c.Del(context.Background(), k).Err(); err != nil {
			t.Errorf("del %s: %v", k, err)
		}
	}
}

// harness runs the conformance suite through client; peers are made by
// newPeer. Each store gets a prefix of its own, which its peers share.
func harness(client redis.UniversalClient, newPeer func(t *testing.T) redis.UniversalClient) storetest.Harness {
	return harnessOn(func(prefix string) (*redisstore.Store, error) {
		return redisstore.New(client, redisstore.Options{Prefix: prefix})
	}, client, newPeer)
}

// harnessOn is harness with the stores under test made by open; client
// inspects and drops their keys.
func harnessOn(open func(prefix string) (*redisstore.Store, error), client redis.UniversalClient, newPeer func(t *testing.T) redis.UniversalClient) storetest.Harness {
	var (
		mu       sync.Mutex
		prefixes = map[store.Store]string{}
	)
	prefixOf := func(t *testing.T, s store.Store) string {
		mu.Lock()
		defer mu.Unlock()
		p, ok := prefixes[s]
		if !ok {
			t.Fatalf("store %p was not made by the harness", s)
		}
		return p
	}
	return storetest.Harness{
		New: func(t *testing.T) store.Store {
			prefix := uniquePrefix()
			s, err := open(prefix)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			prefixes[s] = prefix
			mu.Unlock()
			t.Cleanup(func() { dropPrefix(t, client, prefix) })
			return s
		},
		Peer: func(t *testing.T, s store.Store) store.Store {
			p, err := redisstore.New(newPeer(t), redisstore.Options{Prefix: prefixOf(t, s)})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		IndexKeys: func(t *testing.T, s store.Store) []string {
			return keysUnder(t, client, prefixOf(t, s))
		},
		NativeExpiry: true,
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	client := newClient(t, nil)
	// The peer keeps go-redis's default (context deadlines ignored on the
	// socket), so the suite covers the store's own watchdog path too.
	storetest.Run(t, harness(client, func(t *testing.T) redis.UniversalClient {
		return newClient(t, func(o *redis.Options) { o.ContextTimeoutEnabled = false })
	}))
}

// request is a reservation of key with a lease of a minute and the
// lifetime life.
func request(key string, life time.Duration) store.ReserveRequest {
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash:     store.HashKey("test", key),
			Scope:       "test",
			Key:         key,
			Fingerprint: "fp",
			Binding:     "POST /x",
			State:       store.InProgress,
			Token:       1,
			RequestID:   "req",
		},
		Lease:         time.Minute,
		TTL:           life,
		TakeOverStale: true,
	}
}

func newStore(t *testing.T, client redis.UniversalClient) (*redisstore.Store, string) {
	t.Helper()
	prefix := uniquePrefix()
	s, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); dropPrefix(t, client, prefix) })
	return s, prefix
}

// TestNativeTTL shows that Redis itself drops a record at its ExpiresAt:
// the key is really gone, not just hidden from readers.
func TestNativeTTL(t *testing.T) {
	t.Parallel()
	client := newClient(t, nil)
	s, _ := newStore(t, client)
	ctx := context.Background()

	req := request("ttl", 1500*time.Millisecond)
	if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("Reserve: %+v, %v", res, err)
	}
	key := s.Key(req.Record.KeyHash)
	if ttl := client.PTTL(ctx, key).Val(); ttl <= time.Second || ttl > 1500*time.Millisecond {
		t.Fatalf("PTTL after Reserve %v, want about 1.5s", ttl)
	}
	// Complete gives the key the completion's lifetime, here a shorter one.
	c := store.Completion{
		Fence: store.Fence{KeyHash: req.Record.KeyHash, Scope: "test", Token: req.Record.Token},
		State: store.Succeeded, Value: []byte("v"), TTL: time.Second,
	}
	sent := time.Now() // the lifetime starts on Redis's clock once the script runs, after this
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl <= 500*time.Millisecond || ttl > time.Second {
		t.Fatalf("PTTL after Complete %v, want about 1s", ttl)
	}
	if n := client.Exists(ctx, key).Val(); n != 1 {
		t.Fatalf("EXISTS %s = %d before expiry", key, n)
	}
	deadline := time.Now().Add(3 * time.Second)
	for client.Exists(ctx, key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("key %s still exists 3s after its ExpiresAt", key)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if waited := time.Since(sent); waited < time.Second {
		t.Fatalf("key vanished after %v, before its ExpiresAt", waited)
	}
	if _, err := s.Get(ctx, "test", req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after expiry: %v", err)
	}
}

// TestLayout pins down the key names and the record's encoding: one hash per
// record under prefix{keyhash}, the token as a decimal string.
func TestLayout(t *testing.T) {
	t.Parallel()
	client := newClient(t, nil)
	s, prefix := newStore(t, client)
	ctx := context.Background()
	req := request("the-raw-key", time.Hour)
	req.Record.Token = math.MaxUint64 // no double holds it exactly
	if _, err := s.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	want := prefix + "{" + req.Record.KeyHash + "}"
	if keys := keysUnder(t, client, prefix); len(keys) != 1 || keys[0] != want {
		t.Fatalf("keys %v, want [%s]", keys, want)
	}
	if tok := client.HGet(ctx, want, "tok").Val(); tok != "18446744073709551615" {
		t.Fatalf("stored token %q", tok)
	}
	got, err := s.Get(ctx, "test", req.Record.KeyHash)
	if err != nil || got.Token != math.MaxUint64 {
		t.Fatalf("Get: token %d, %v", got.Token, err)
	}
	// A token differing in the last bit, equal as a double, is fenced off.
	f := store.Fence{KeyHash: req.Record.KeyHash, Scope: "test", Token: math.MaxUint64 - 1}
	if err := s.Renew(ctx, f, time.Hour); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew with a token one below: %v", err)
	}
	f.Token = math.MaxUint64
	if err := s.Renew(ctx, f, time.Hour); err != nil {
		t.Fatal(err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	if _, err := redisstore.New(client, redisstore.Options{Prefix: "a{b}:"}); err == nil {
		t.Fatal("a prefix with a hash tag was accepted")
	}
	if _, err := redisstore.New(nil, redisstore.Options{}); err == nil {
		t.Fatal("a nil client was accepted")
	}
	s, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if k := s.Key("ab"); k != "idem:{ab}" {
		t.Fatalf("default key name %q", k)
	}
}

// TestCloseKeepsClient: closing the store fails its later calls with
// ErrClosed and leaves the caller's client working.
func TestCloseKeepsClient(t *testing.T) {
	t.Parallel()
	client := newClient(t, nil)
	s, _ := newStore(t, client)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "test", store.HashKey("test", "k")); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("client after store Close: %v", err)
	}
}
