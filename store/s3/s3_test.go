package s3store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
	"github.com/idem-dev/idem/store/storetest"
)

func TestMain(m *testing.M) {
	race.Child() // a re-executed test binary is a racer of TestMultiProcessRace
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChildMain())
	}
	// The SDK and the servers leave nothing running once the idle
	// connections are closed; a leak is the store's.
	testkit.VerifyTestMainAfter(m, stopServers)
}

// uniquePrefix isolates a store's objects from every other test's.
func uniquePrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t-" + hex.EncodeToString(b) + "/"
}

// newStore returns a store on srv under a fresh prefix, and deletes what
// it wrote when the test ends.
func newStore(t testing.TB, srv *server, c *s3.Client) *s3store.Store {
	t.Helper()
	if c == nil {
		c = srv.client(nil)
	}
	prefix := uniquePrefix()
	s, err := s3store.New(c, s3store.Options{Bucket: srv.bucket, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropPrefix(srv, prefix) })
	return s
}

// sibling is another store on of's bucket and prefix through c: another
// process sharing its records.
func sibling(t testing.TB, of *s3store.Store, c *s3.Client) *s3store.Store {
	t.Helper()
	s, err := s3store.New(c, of.Options())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dropPrefix(srv *server, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := srv.client(nil)
	for _, k := range listKeys(ctx, c, srv.bucket, prefix) {
		_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &srv.bucket, Key: aws.String(k)})
	}
}

// harness runs the conformance suite on srv. Each store gets a prefix of
// its own, which its peer (another client, as another process would have)
// shares.
func harness(srv *server) storetest.Harness {
	var (
		mu     sync.Mutex
		stores = map[store.Store]*s3store.Store{}
	)
	own := func(t *testing.T, s store.Store) *s3store.Store {
		mu.Lock()
		defer mu.Unlock()
		st, ok := stores[s]
		if !ok {
			t.Fatalf("store %p was not made by the harness", s)
		}
		return st
	}
	return storetest.Harness{
		// gofakes3 ignores If-Match on DeleteObject, and versitygw does
		// not apply it atomically with a conditional PutObject: a delete
		// and a takeover on one ETag can both succeed (docs/stores/S3.md).
		UnconditionalDeletes: true,
		New: func(t *testing.T) store.Store {
			s := newStore(t, srv, nil)
			mu.Lock()
			stores[s] = s
			mu.Unlock()
			return s
		},
		Peer: func(t *testing.T, s store.Store) store.Store {
			return sibling(t, own(t, s), srv.peerClient())
		},
		IndexKeys: func(t *testing.T, s store.Store) []string {
			return listKeys(context.Background(), srv.client(nil), srv.bucket, own(t, s).Options().Prefix)
		},
		// Cleanup really deletes (S3 expires nothing by itself), so the
		// suite counts what it removes.
		NativeExpiry: false,
		// Expiry is judged on the server's Date, in whole seconds.
		Resolution: time.Second,
	}
}

// TestConformance runs the suite on the real server. Not in parallel with
// the package's other tests: its clock-skew cases renew one-second leases
// every third of a second, which the multi-process tests beside it would
// starve on a small machine.
func TestConformance(t *testing.T) {
	storetest.Run(t, harness(realServer(t)))
}

// TestConformanceGoFakeS3 runs the suite in process, in a fraction of the
// time. gofakes3 honours If-None-Match and If-Match on PutObject, which is
// all the suite's races need; it ignores If-Match on DeleteObject (see
// docs/stores/S3.md). Not in parallel, as TestConformance.
func TestConformanceGoFakeS3(t *testing.T) {
	storetest.Run(t, harness(fakeServer(t)))
}
