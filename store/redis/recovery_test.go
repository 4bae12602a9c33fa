package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
)

// TestRecovery runs a store against a throwaway server that freezes, dies
// and comes back: while the server is away every call fails by its
// context's deadline, never later and without a panic; once it is back the
// same Store works again. It runs two stores, one on a client that honours
// context deadlines and one on go-redis's defaults, which do not.
//
// It is not parallel: it bounds how late a call may fail (deadline plus
// slack), and runs before the parallel tests, alone on the CPU.
func TestRecovery(t *testing.T) {
	srv := startServer(t)
	const deadline = 300 * time.Millisecond
	const slack = 400 * time.Millisecond // scheduling, -race

	type subject struct {
		name string
		s    *redisstore.Store
	}
	var subjects []subject
	for _, cte := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: cte})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.Options{Prefix: uniquePrefix()})
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, subject{fmt.Sprintf("ContextTimeoutEnabled=%v", cte), s})
	}
	rs, err := redisstore.NewRueidis(newRueidis(t, srv.addr()), redisstore.Options{Prefix: uniquePrefix()})
	if err != nil {
		t.Fatal(err)
	}
	subjects = append(subjects, subject{"rueidis", rs})

	var seq atomic.Int64
	// call reserves a fresh key and completes it, with a deadline.
	call := func(s *redisstore.Store) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		begin := time.Now()
		req := request(fmt.Sprintf("k-%d", seq.Add(1)), time.Hour)
		req.Record.Token = uint64(seq.Add(1))
		res, err := s.Reserve(ctx, req)
		if err == nil && !res.Acquired {
			err = fmt.Errorf("fresh key not acquired: %+v", res.Existing)
		}
		if err == nil {
			err = s.Complete(ctx, store.Completion{
				Fence: store.Fence{KeyHash: req.Record.KeyHash, Scope: "test", Token: req.Record.Token},
				State: store.Succeeded, Value: []byte("ok"), TTL: time.Hour,
			})
		}
		return time.Since(begin), err
	}

	for _, sub := range subjects {
		if _, err := call(sub.s); err != nil {
			t.Fatalf("%s: before any failure: %v", sub.name, err)
		}
	}

	// A frozen server: connections stay open and nothing answers.
	srv.pause()
	for _, sub := range subjects {
		took, err := call(sub.s)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: frozen server: %v, want DeadlineExceeded", sub.name, err)
		}
		if took > deadline+slack {
			t.Errorf("%s: frozen server: the call took %v, deadline %v", sub.name, took, deadline)
		}
	}
	srv.resume()

	// Clients call all along while the server dies and comes back.
	var (
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		slowest time.Duration
		fails   = map[string]int{}
		lastErr = map[string]error{}
	)
	for _, sub := range subjects {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					took, err := call(sub.s)
					mu.Lock()
					slowest = max(slowest, took)
					if err != nil {
						fails[sub.name]++
						lastErr[sub.name] = err
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			}()
		}
	}
	time.Sleep(100 * time.Millisecond)
	srv.kill()
	time.Sleep(time.Second)
	mu.Lock()
	for _, sub := range subjects {
		if fails[sub.name] == 0 {
			t.Errorf("%s: no call failed while the server was down", sub.name)
		}
		t.Logf("%s: %d failed calls while down, last: %v", sub.name, fails[sub.name], lastErr[sub.name])
	}
	mu.Unlock()

	// The same stores work again once the server is back (empty: it kept
	// nothing, scripts included, so EVALSHA falls back to EVAL).
	srv.start()
	for _, sub := range subjects {
		back := time.Now()
		for {
			_, err := call(sub.s)
			if err == nil {
				t.Logf("%s: working again %v after the restart", sub.name, time.Since(back).Round(time.Millisecond))
				break
			}
			if time.Since(back) > 10*time.Second {
				t.Fatalf("%s: still failing 10s after the restart: %v", sub.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	if slowest > deadline+slack {
		t.Errorf("the slowest call took %v, deadline %v", slowest, deadline)
	}
	t.Logf("slowest call %v (deadline %v)", slowest.Round(time.Millisecond), deadline)
}

// quietLogger drops go-redis's complaints about failed dials, which the
// recovery and reconnection tests cause on purpose, and passes on
// everything else. TestMain installs it.
type quietLogger struct{}

var stderr = log.New(os.Stderr, "redis: ", log.LstdFlags)

func (quietLogger) Printf(_ context.Context, format string, v ...any) {
	if msg := fmt.Sprintf(format, v...); !strings.Contains(msg, "failed to dial") {
		stderr.Print(msg)
	}
}
