package idem_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
)

// TestHoldAcrossTakeover: the operation of the first holder and that of
// the caller that takes the key over after the first died see the same
// record ID (the one RecordID computes beforehand), and different tokens.
func TestHoldAcrossTakeover(t *testing.T) {
	b := setup(t, idem.Policy{Lease: time.Minute})
	if _, ok := idem.HoldFrom(bg); ok {
		t.Fatal("a hold outside Do")
	}
	c := call("k-1")
	want := idem.RecordID(c.Scope, c.Key)
	if want == "" || want != idem.RecordID(c.Scope, "  k-1 ") {
		t.Fatalf("RecordID %q, and %q for the untrimmed key", want, idem.RecordID(c.Scope, "  k-1 "))
	}
	if other := idem.RecordID("other-scope", c.Key); other == want {
		t.Fatal("two scopes share a record ID")
	}

	first := make(chan idem.Hold, 1)
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := b.eng.Do(bg, c, func(ctx context.Context) ([]byte, error) {
			h, _ := idem.HoldFrom(ctx)
			first <- h
			<-release // dies, for the store: it never completes in time
			return []byte("late"), nil
		})
		done <- err
	}()
	h1 := <-first
	b.clock.Add(2 * time.Minute) // the first holder's lease is over
	var h2 idem.Hold
	res, err := b.eng.Do(bg, c, func(ctx context.Context) ([]byte, error) {
		h2, _ = idem.HoldFrom(ctx)
		return []byte("second"), nil
	})
	close(release)
	if err != nil || !res.TookOver {
		t.Fatalf("takeover: %+v, %v", res, err)
	}
	if h1.ID != want || h2.ID != want {
		t.Fatalf("IDs %q then %q, want %q for both", h1.ID, h2.ID, want)
	}
	if h1.TookOver || !h2.TookOver || h1.Token == h2.Token || h2.Key != "k-1" {
		t.Fatalf("holds %+v and %+v", h1, h2)
	}
	if err := <-done; err == nil {
		t.Fatal("the stale holder stored its outcome")
	}
	if idem.RecordID(c.Scope, " ") != "" {
		t.Fatal("an invalid key has a record ID")
	}
}

// ExampleHoldFrom names an operation's own write (a task, a transfer) by
// its record's ID, so that a caller that takes the key over after the
// first holder died finds that write instead of making a second.
func ExampleHoldFrom() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	call := idem.Call{Scope: "charge_customer", Key: "charge-ORD-123"}
	res, _ := eng.Do(context.Background(), call, func(ctx context.Context) ([]byte, error) {
		h, _ := idem.HoldFrom(ctx)
		return []byte("tasks/" + h.ID + ".json"), nil // create it with If-None-Match: *
	})
	fmt.Println(string(res.Value))
	fmt.Println(idem.RecordID(call.Scope, call.Key)) // the same, known beforehand
	// Output:
	// tasks/8b9e5a22-94f6-5f46-a497-eb33a8257997.json
	// 8b9e5a22-94f6-5f46-a497-eb33a8257997
}
