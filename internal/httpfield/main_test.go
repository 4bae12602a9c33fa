package httpfield_test

import (
	"testing"

	"github.com/idem-dev/idem/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
