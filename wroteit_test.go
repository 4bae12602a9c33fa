package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// replyLost applies a completion, then answers as a store client that
// retried it after its reply was lost does (a lost lease), and fails the
// next reads as a store in the middle of a failover does.
type replyLost struct {
	store.Store
	failGets atomic.Int64
}

func (s *replyLost) Complete(ctx context.Context, c store.Completion) error {
	if err := s.Store.Complete(ctx, c); err != nil {
		return err
	}
	s.failGets.Store(3)
	return fmt.Errorf("retried after a lost reply: %w", store.ErrLeaseLost)
}

func (s *replyLost) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	if s.failGets.Add(-1) >= 0 {
		return store.Record{}, errors.New("connection refused")
	}
	return s.Store.Get(ctx, scope, keyHash)
}

// TestRecordedOutcomeReadThroughAnOutage: a completion the store applied
// and whose reply was lost is found as written once the store answers
// again, though the first reads after it fail: the call is answered as
// recorded, not as NotRecorded (a 503 for an outcome every retry replays).
func TestRecordedOutcomeReadThroughAnOutage(t *testing.T) {
	t.Parallel()
	st := &replyLost{Store: memory.New()}
	eng := idem.New(st, idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	res, err := eng.Do(bg, idem.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { return []byte("v"), nil })
	if err != nil || res.NotRecorded || string(res.Value) != "v" {
		t.Fatalf("Do: %+v %v, want the recorded outcome", res, err)
	}
	if st.failGets.Load() >= 0 {
		t.Fatal("the reads after the write did not fail: the test shows nothing")
	}
}
