package httpfield_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idem-dev/idem/internal/httpfield"
)

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, `"`, `"a";p=1`, `"a", "b"`, ` "x" `, `"\u00fc"`, "\"caf\xc3\xa9\""} {
		f.Add(s, "")
	}
	f.Add("a", "b")
	f.Fuzz(func(t *testing.T, v1, v2 string) {
		values := []string{v1}
		if v2 != "" {
			values = append(values, v2)
		}
		key, present, err := httpfield.ParseKey(values)
		if !present {
			t.Fatal("a field was present")
		}
		if len(values) == 2 {
			if !errors.Is(err, httpfield.ErrMultipleKeys) {
				t.Fatalf("two fields: %v", err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, httpfield.ErrMalformedKey) || !strings.HasPrefix(strings.TrimSpace(v1), `"`) {
				t.Fatalf("ParseKey(%q): %v", v1, err)
			}
			return
		}
		if !strings.HasPrefix(strings.TrimSpace(v1), `"`) && key != strings.TrimSpace(v1) {
			t.Fatalf("bare token %q became %q", v1, key)
		}
	})
}

func TestFormatKeyRoundTrip(t *testing.T) {
	for _, k := range []string{"order-1", `"quoted"`, `"`, "a b", `x"y`} {
		got, ok, err := httpfield.ParseKey([]string{httpfield.FormatKey(k)})
		if err != nil || !ok || got != k {
			t.Errorf("ParseKey(FormatKey(%q)) = %q, %v, %v", k, got, ok, err)
		}
	}
}
