package memory_test

import (
	"testing"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New:       func(t *testing.T) store.Store { return memory.New() },
		IndexKeys: func(t *testing.T, s store.Store) []string { return s.(*memory.Store).Keys() },
	})
}

func BenchmarkEngine(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return memory.New() })
}
