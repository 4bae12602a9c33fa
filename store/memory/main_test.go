package memory_test

import (
	"testing"

	"github.com/idem-dev/idem/internal/testkit"
)

// TestMain fails the run if a test leaves a goroutine behind: a memory
// store's waiters and an engine's lease renewals end with their calls.
func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
