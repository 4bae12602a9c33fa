package history_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/storetest/history"
)

// A history of 200 random operations by four clients of one memory store,
// checked for linearizability. (A store's tests call history.Check, which
// records a history and fails the test unless it is linearizable; the
// conformance suite's Linearizable case does it for every store.)
func ExampleRecord() {
	s := memory.New()
	defer s.Close()
	h := history.Record(context.Background(), history.Config{Clients: 4, Ops: 50}, s)
	res, _ := h.Check(time.Minute)
	fmt.Println(h.Len(), "operations:", res)
	// Output: 200 operations: Ok
}
