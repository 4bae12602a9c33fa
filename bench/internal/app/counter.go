// Package app is the trivial operation every contender runs: it counts its
// executions per idempotency key, so that the harness can tell how many
// times each key really ran, and answers a ~40 B JSON body.
package app

import (
	"encoding/json"
	"fmt"
	"sync"
)

// Counter counts executions per key. The zero value is ready to use.
type Counter struct {
	mu    sync.Mutex
	total int64
	byKey map[string]int64 // guarded by mu
}

// Hit records one execution for key ("" for a request without a key) and
// returns the body to answer: the same size for every execution.
func (c *Counter) Hit(key string) []byte {
	c.mu.Lock()
	c.total++
	n := c.total
	if key != "" {
		if c.byKey == nil {
			c.byKey = make(map[string]int64)
		}
		c.byKey[key]++
	}
	c.mu.Unlock()
	return fmt.Appendf(nil, `{"id":"ch_%010d","amount":1000,"ok":true}`, n)
}

// Reset forgets every count.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.total, c.byKey = 0, nil
	c.mu.Unlock()
}

// Counts is the summary the harness reads after a run.
type Counts struct {
	Executions int64 `json:"executions"` // every execution, keyed or not
	Keys       int   `json:"keys"`       // distinct keys executed
	MaxPerKey  int64 `json:"max_per_key"`
	MinPerKey  int64 `json:"min_per_key"`
	// PerKey is filled only when asked for (the race scenario's few keys).
	PerKey map[string]int64 `json:"per_key,omitempty"`
}

// Snapshot returns the counts, with every key's when perKey is true.
func (c *Counter) Snapshot(perKey bool) Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Counts{Executions: c.total, Keys: len(c.byKey)}
	if perKey {
		s.PerKey = make(map[string]int64, len(c.byKey))
	}
	first := true
	for k, n := range c.byKey {
		if first || n < s.MinPerKey {
			s.MinPerKey = n
		}
		first = false
		s.MaxPerKey = max(s.MaxPerKey, n)
		if perKey {
			s.PerKey[k] = n
		}
	}
	return s
}

// JSON returns Snapshot as JSON.
func (c *Counter) JSON(perKey bool) []byte {
	b, _ := json.Marshal(c.Snapshot(perKey))
	return b
}
