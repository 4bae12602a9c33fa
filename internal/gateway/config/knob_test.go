package config

import (
	"testing"

	"github.com/idem-dev/idem"
)

// Every knob's String form parses back to it, and a form of another knob
// is refused.
func TestParseKnobs(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"release", "cache", "conflict"} {
		if o, err := parseOnFailure(s); err != nil || o.String() != s {
			t.Errorf("%s: %v %v", s, o, err)
		}
	}
	if _, err := parseOnFailure("retry"); err == nil {
		t.Error("parseOnFailure(retry) accepted")
	}
	for _, o := range []idem.OnUnknown{idem.OnUnknownConflict, idem.OnUnknownRelease} {
		got, err := parseOnUnknown(o.String())
		if err != nil || got != o {
			t.Fatalf("parseOnUnknown(%q) = %v %v", o.String(), got, err)
		}
	}
	if _, err := parseOnUnknown("retry"); err == nil {
		t.Fatal("parseOnUnknown accepted retry")
	}
	for _, o := range []idem.OnStale{idem.OnStaleRetry, idem.OnStaleConflict} {
		if got, err := parseOnStale(o.String()); err != nil || got != o {
			t.Errorf("parseOnStale(%q) = %v %v", o.String(), got, err)
		}
	}
	for _, o := range []idem.OnStoreError{idem.OnStoreErrorFailClosed, idem.OnStoreErrorFailOpen} {
		if got, err := parseOnStoreError(o.String()); err != nil || got != o {
			t.Errorf("parseOnStoreError(%q) = %v %v", o.String(), got, err)
		}
	}
	_, err := parseOnStale("x")
	if want := `on_stale "x": want retry or conflict`; err == nil || err.Error() != want {
		t.Errorf("parseOnStale(x): %v, want %s", err, want)
	}
	_, err = parseOnFailure("x")
	if want := `on_failure "x": want release, cache or conflict`; err == nil || err.Error() != want {
		t.Errorf("parseOnFailure(x): %v, want %s", err, want)
	}
}
