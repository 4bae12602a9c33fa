package config

import (
	"fmt"
	"strings"

	"github.com/idem-dev/idem"
)

// The policy's knobs in the configuration file: each is written as its
// value's String form ("release", "fail_open"...).

func parseOnFailure(s string) (idem.OnFailure, error) {
	return parseKnob("on_failure", s, idem.OnFailureRelease, idem.OnFailureCache, idem.OnFailureConflict)
}

func parseOnStale(s string) (idem.OnStale, error) {
	return parseKnob("on_stale", s, idem.OnStaleRetry, idem.OnStaleConflict)
}

func parseOnStoreError(s string) (idem.OnStoreError, error) {
	return parseKnob("on_store_error", s, idem.OnStoreErrorFailClosed, idem.OnStoreErrorFailOpen)
}

func parseOnUnknown(s string) (idem.OnUnknown, error) {
	return parseKnob("on_unknown", s, idem.OnUnknownConflict, idem.OnUnknownRelease)
}

// parseKnob returns the one of values whose String form is s, or an error
// naming the knob and the forms it takes.
func parseKnob[T fmt.Stringer](name, s string, values ...T) (T, error) {
	forms := make([]string, len(values))
	for i, v := range values {
		if s == v.String() {
			return v, nil
		}
		forms[i] = v.String()
	}
	var zero T
	want := strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
	return zero, fmt.Errorf("%s %q: want %s", name, s, want)
}
