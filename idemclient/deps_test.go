package idemclient

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/idem-dev/idem/store"
)

// The client is imported by mobile and CLI programs: it must not bring the
// server (the engine, the store contract, the middleware's telemetry) with
// it. Everything it imports outside the standard library is listed here.
func TestImportsStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	want := []string{"github.com/idem-dev/idem/idemclient", "github.com/idem-dev/idem/idemwire"}
	if !slices.Equal(got, want) {
		t.Fatalf("idemclient's non-standard dependencies = %q, want %q", got, want)
	}
}

// Outbox files written before the client stopped importing the store
// contract are named by store.HashKey: the IDs must not change.
func TestPendingIDIsStoreHashKey(t *testing.T) {
	for _, p := range []Pending{
		{},
		{Scope: "s", Method: "POST", URL: "https://api.example/charges", Key: "k-1"},
		{Method: "PUT", URL: "https://api.example/" + strings.Repeat("x", 300), Key: strings.Repeat("é", 100)},
	} {
		want := store.HashKey("outbox", p.Scope+"\x00"+p.Method+"\x00"+p.URL+"\x00"+p.Key)
		if got := p.ID(); got != want {
			t.Errorf("ID(%+v) = %s, store.HashKey gives %s", p, got, want)
		}
	}
}
