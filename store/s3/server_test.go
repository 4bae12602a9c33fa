package s3store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// The tests run against a real S3-compatible server with conditional
// writes: the one IDEM_TEST_S3 names (http://KEY:SECRET@host:port; the
// credentials default to testkey/testsecret), or else a versitygw that the
// tests start over a temporary directory and stop at the end. The binary is
// looked for where scripts/s3-server.sh installs it, in $(go env GOPATH)/bin
// and on PATH; IDEM_VERSITYGW names it explicitly. Without a server the
// tests that need one skip, or fail under CI=true.
const (
	envServer    = "IDEM_TEST_S3"
	envVersitygw = "IDEM_VERSITYGW"
	defaultKey   = "testkey"
	defaultSec   = "testsecret"
)

// server is an S3 endpoint with a bucket for this test binary.
type server struct {
	name        string // for messages: "versitygw", "IDEM_TEST_S3", "gofakes3"
	endpoint    string
	key, secret string
	bucket      string

	stop func() // ends what was started for it; nil for IDEM_TEST_S3
}

var (
	realOnce sync.Once
	real     *server
	realErr  error

	fakeOnce sync.Once
	fake     *server
)

// realServer returns the conditional-write server the tests run against,
// starting it on first use.
func realServer(t testing.TB) *server {
	t.Helper()
	realOnce.Do(func() { real, realErr = openRealServer() })
	if realErr != nil {
		testenv.Unavailable(t, "no S3 server: %v", realErr)
	}
	return real
}

// fakeServer returns gofakes3 on an in-process listener: fast, but see
// TestGoFakeS3Differences for where it departs from S3.
func fakeServer(t testing.TB) *server {
	t.Helper()
	fakeOnce.Do(func() {
		ts := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
		fake = &server{name: "gofakes3", endpoint: ts.URL, key: defaultKey, secret: defaultSec, stop: ts.Close}
		if err := fake.makeBucket(); err != nil {
			panic(err) // in-process: cannot happen short of a bug
		}
	})
	return fake
}

// stopServers stops what the tests started; TestMain calls it.
func stopServers() {
	if real != nil {
		if real.stop != nil {
			real.stop()
		} else {
			real.dropBucket()
		}
	}
	if fake != nil {
		fake.stop()
	}
	transport.CloseIdleConnections()
	peerTransport.CloseIdleConnections()
}

// peerClient returns a client of srv with a connection pool of its own.
func (srv *server) peerClient() *s3.Client {
	return srv.client(func(o *s3.Options) { o.HTTPClient = &http.Client{Transport: peerTransport} })
}

func openRealServer() (*server, error) {
	if v := os.Getenv(envServer); v != "" {
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("%s=%q is not a URL", envServer, v)
		}
		srv := &server{name: envServer, key: defaultKey, secret: defaultSec}
		if u.User != nil {
			srv.key = u.User.Username()
			srv.secret, _ = u.User.Password()
		}
		u.User = nil
		srv.endpoint = u.String()
		if err := srv.makeBucket(); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", envServer, srv.endpoint, err)
		}
		return srv, nil
	}
	bin, err := findVersitygw()
	if err != nil {
		return nil, err
	}
	return startVersitygw(bin)
}

// findVersitygw looks where scripts/s3-server.sh installs it, then in
// GOPATH/bin, then on PATH.
func findVersitygw() (string, error) {
	if p := os.Getenv(envVersitygw); p != "" {
		return p, nil
	}
	var dirs []string
	cache := os.Getenv("IDEM_CACHE_DIR")
	if cache == "" {
		if c, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(c, "idem")
		}
	}
	if cache != "" {
		dirs = append(dirs, filepath.Join(cache, "bin"))
	}
	for _, p := range filepath.SplitList(build.Default.GOPATH) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is unset and versitygw is not installed (looked in %v and PATH); run scripts/s3-server.sh install", envServer, dirs)
}

// startVersitygw runs versitygw on a free loopback port over a temporary
// directory. The process dies with the test binary even when the binary
// crashes (see testkit.DieWithParent).
func startVersitygw(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "idem-s3-test-")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var lastErr error
	for range 3 { // a port picked free may be taken before versitygw binds it
		addr, err := freeAddr()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cmd := exec.Command(bin, "--port", addr, "-q", "posix", root)
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+defaultKey, "ROOT_SECRET_KEY="+defaultSec)
		cmd.Stdout, cmd.Stderr = logf, logf
		testkit.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			logf.Close()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
		kill := func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(3 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		srv := &server{name: "versitygw", endpoint: "http://" + addr, key: defaultKey, secret: defaultSec}
		if lastErr = waitUp(srv, exited); lastErr == nil {
			srv.stop = func() { kill(); os.RemoveAll(dir) }
			return srv, nil
		}
		kill()
		log, _ := os.ReadFile(filepath.Join(dir, "versitygw.log"))
		lastErr = fmt.Errorf("versitygw on %s: %w; log: %s", addr, lastErr, log)
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitUp waits for the server to answer and makes the test bucket.
func waitUp(srv *server, exited <-chan struct{}) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := srv.makeBucket()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited")
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (srv *server) makeBucket() error {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	srv.bucket = "idem-test-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := srv.client(nil).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &srv.bucket})
	return err
}

// dropBucket empties and deletes the bucket of a server that outlives the
// tests.
func (srv *server) dropBucket() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := srv.client(nil)
	for _, k := range listKeys(ctx, c, srv.bucket, "") {
		_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &srv.bucket, Key: aws.String(k)})
	}
	_, _ = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &srv.bucket})
}

// transport is shared by every client of the tests, so that TestMain can
// close its idle connections at the end. It keeps enough idle connections
// for the suite's 128 racers; the default 2 per host would open and close
// a connection per request.
var transport = &http.Transport{
	Proxy:               nil,
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConns:        512,
	MaxIdleConnsPerHost: 256,
	IdleConnTimeout:     30 * time.Second,
}

// peerTransport is the connection pool of peer clients, which share
// nothing with the others, as another process's would not.
var peerTransport = transport.Clone()

// client returns a new S3 client of srv, on the shared connection pool.
func (srv *server) client(mod func(*s3.Options)) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.endpoint),
		Region:       "us-east-1",
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(srv.key, srv.secret, ""),
		HTTPClient:   &http.Client{Transport: transport},
	}, func(o *s3.Options) {
		if mod != nil {
			mod(o)
		}
	})
}

// listKeys lists every object key under prefix.
func listKeys(ctx context.Context, c *s3.Client, bucket, prefix string) []string {
	var keys []string
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return keys
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}
