package idem_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// The engine's errors are logged (the gateway, the admin API, a caller's
// own logs), so their texts name a key by its printed hash, as log lines
// do, never as it is: a key may carry what the client put in it.
func TestErrorsPrintKeyHash(t *testing.T) {
	t.Parallel()
	r := idem.Redactor{MAC: func(b []byte) string { return fmt.Sprintf("mac%x", sha256.Sum256(b))[:20] }}
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1, Lease: time.Hour}, idem.WithRedactor(r))
	c := call("raw-secret-key")
	op := &counter{value: "v"}
	if _, err := eng.Do(bg, c, op.fn); err != nil {
		t.Fatal(err)
	}
	check := func(what, key string, err error, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
		printed := r.Key(c.Scope, key)
		if strings.Contains(err.Error(), "raw-secret") || !strings.Contains(err.Error(), "key_hash "+printed) {
			t.Errorf("%s: %q: want key_hash %s, not the raw key", what, err, printed)
		}
	}
	other := c
	other.Fingerprint = "fp2"
	_, err := eng.Do(bg, other, op.fn)
	check("conflict", c.Key, err, idem.ErrFingerprintMismatch)
	check("release of a succeeded key", c.Key, eng.Release(bg, c.Scope, c.Key), idem.ErrNotReleasable)
	check("release of an absent key", "raw-secret-other", eng.Release(bg, c.Scope, "raw-secret-other"), store.ErrNotFound)
}
