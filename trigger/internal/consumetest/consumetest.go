// Package consumetest is the test rig that the broker consumers of
// trigger/nats and trigger/amqp share: a quiet logger, a Starter over the
// memory store, a bounded wait on a channel, a consumer run in the
// background, and the kill tests' scenarios, so that both adapters
// are tested under the same scenarios.
package consumetest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit/killtest"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/trigger"
)

// Quiet is a logger that writes nothing.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// MemStarter is a Starter over a memory store, closed when t ends.
func MemStarter(t *testing.T) *trigger.Starter {
	eng := idem.New(memory.New(), idem.Policy{})
	t.Cleanup(func() { eng.Close() })
	return &trigger.Starter{Engine: eng, Scope: "events"}
}

// WaitFor returns what ch yields, or fails t after 30 s without it.
func WaitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("after 30 s, no %s", what)
		panic("unreachable")
	}
}

// Run runs consume in the background until cancel is called; wait returns
// consume's error once closed (if not nil) has returned too, or fails t if
// consume does not return within a minute. Both run when t ends.
func Run(t *testing.T, consume func(ctx context.Context) error, closed func()) (cancel func(), wait func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
	wait = sync.OnceValue(func() error {
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			t.Error("Consume did not return within a minute of its context's end")
			return nil
		}
		if closed != nil {
			closed()
		}
		return err
	})
	t.Cleanup(func() {
		cancel()
		wait()
	})
	return cancel, wait
}

// KillTests runs killed, which publishes cfg.Events events to
// cfg.Consumers consumer processes of its broker and kills them (see
// killtest.Run), under the kill tests' configurations:
//   - RunEachEventOnce: 1,000 events, effects written with pgtx.RunLog.Once,
//     14 kills;
//   - StarterTx: 300 events, effects written in the Starter's transaction
//     (pgtx.Store.Tx, which commits with idem's record: a kill before that
//     commit leaves neither), 6 kills;
//   - Long: the same with 10,000 events and 80 kills, and 3,000 events and
//     30 kills (IDEM_LONG=1, make long; skipped otherwise).
//
// Each runs with 3 consumers, in parallel with the others.
func KillTests(t *testing.T, killed func(t *testing.T, cfg killtest.Config)) {
	run := func(t *testing.T, cfg killtest.Config) {
		cfg.Consumers = 3
		cfg.Timeout = time.Minute + time.Duration(cfg.Events)*90*time.Millisecond
		killed(t, cfg)
	}
	t.Run("RunEachEventOnce", func(t *testing.T) {
		t.Parallel()
		run(t, killtest.Config{Events: 1000, Effect: killtest.RunLog,
			KillInHandler: 3, KillInEffect: 4, KillAfterEffect: 4, KillAfterRecord: 3})
	})
	t.Run("StarterTx", func(t *testing.T) {
		t.Parallel()
		run(t, killtest.Config{Events: 300, Effect: killtest.StarterTx,
			KillInHandler: 1, KillInEffect: 3, KillAfterRecord: 2})
	})
	t.Run("Long", func(t *testing.T) {
		t.Parallel()
		if os.Getenv("IDEM_LONG") == "" {
			t.Skip("IDEM_LONG=1 runs it")
		}
		t.Run("RunLog", func(t *testing.T) {
			run(t, killtest.Config{Events: 10000, Effect: killtest.RunLog,
				KillInHandler: 20, KillInEffect: 20, KillAfterEffect: 20, KillAfterRecord: 20})
		})
		t.Run("StarterTx", func(t *testing.T) {
			run(t, killtest.Config{Events: 3000, Effect: killtest.StarterTx,
				KillInHandler: 10, KillInEffect: 10, KillAfterRecord: 10})
		})
	})
}
