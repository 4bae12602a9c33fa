package seal_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"go/build"
	"io"
	"log/slog"
	"net"
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

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMainAfter(m, func() {
		if s3srv != nil && s3srv.stop != nil {
			s3srv.stop()
		}
	})
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// s3Server is the S3-compatible server of TestDumpS3: versitygw over a
// temporary directory, installed by scripts/s3-server.sh (as the tests of
// store/s3 use it), or the one IDEM_TEST_S3 names.
type s3Server struct {
	endpoint, key, secret, bucket string
	stop                          func()
}

var (
	s3once sync.Once
	s3srv  *s3Server
	s3err  error
)

func versitygw(t *testing.T) *s3Server {
	t.Helper()
	s3once.Do(func() { s3srv, s3err = startS3() })
	if s3err != nil {
		testenv.Unavailable(t, "no S3 server: %v", s3err)
	}
	return s3srv
}

func (s *s3Server) client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.endpoint),
		Region:       "us-east-1",
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.key, s.secret, ""),
	})
}

func startS3() (*s3Server, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	srv := &s3Server{key: "testkey", secret: "testsecret", bucket: "idem-seal-" + hex.EncodeToString(b)}
	if v := os.Getenv("IDEM_TEST_S3"); v != "" {
		// A long-lived server (scripts/s3-server.sh start): a bucket of
		// this run's own, left behind (the server's directory is temporary).
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("IDEM_TEST_S3=%q is not a URL", v)
		}
		if u.User != nil {
			srv.key = u.User.Username()
			srv.secret, _ = u.User.Password()
		}
		u.User = nil
		srv.endpoint = u.String()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := srv.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &srv.bucket}); err != nil {
			return nil, fmt.Errorf("IDEM_TEST_S3 (%s): %w", srv.endpoint, err)
		}
		return srv, nil
	}
	bin := os.Getenv("IDEM_VERSITYGW")
	if bin == "" {
		var dirs []string
		if c, err := os.UserCacheDir(); err == nil {
			dirs = append(dirs, filepath.Join(c, "idem", "bin"))
		}
		if c := os.Getenv("IDEM_CACHE_DIR"); c != "" {
			dirs = append([]string{filepath.Join(c, "bin")}, dirs...)
		}
		dirs = append(dirs, filepath.Join(build.Default.GOPATH, "bin"))
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, "versitygw")); err == nil {
				bin = filepath.Join(d, "versitygw")
				break
			}
		}
		if bin == "" {
			p, err := exec.LookPath("versitygw")
			if err != nil {
				return nil, fmt.Errorf("versitygw is not installed (looked in %v and PATH); run scripts/s3-server.sh install", dirs)
			}
			bin = p
		}
	}
	dir, err := os.MkdirTemp("", "idem-seal-s3-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--port", addr, "-q", "posix", dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+srv.key, "ROOT_SECRET_KEY="+srv.secret)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv.stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	srv.endpoint = "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = srv.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &srv.bucket})
		cancel()
		if err == nil {
			return srv, nil
		}
		if time.Now().After(deadline) {
			srv.stop()
			return nil, fmt.Errorf("versitygw on %s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
