package dsn

import (
	"os"
	"strings"
	"testing"
)

// TestSchemesDocumented fails when a kind of store is added to the table
// without a line in the package doc, or when Usage (idem --help) leaves
// one out.
func TestSchemesDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	usage := Usage("")
	for _, s := range schemes {
		if !strings.Contains(string(doc), "//\t"+s.names[0]+":") {
			t.Errorf("doc.go has no line for %s:", s.names[0])
		}
		if !strings.Contains(usage, s.usage) {
			t.Errorf("Usage lacks %s", s.usage)
		}
		for _, n := range s.names {
			if got, ok := schemeOf(strings.ToUpper(n)); !ok || got.kind != s.kind {
				t.Errorf("scheme %s: got %v, want kind %s", n, got, s.kind)
			}
		}
	}
}
