package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documents whose file and identifier names are checked.
var namingDocs = []string{"ARCHITECTURE.md", "ISOLATION.md", "stores/*.md", "../README.md"}

var fileNameRE = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.(?:go|ts|sh|md|yaml|yml))`")

// TestFilesNamed checks that every file a document names in backticks
// exists: by its path from the repository's root, or as the end of one
// (outbox-file.ts for clients/typescript/src/outbox-file.ts).
func TestFilesNamed(t *testing.T) {
	all := repoFiles(t, "..", "")
	exists := func(name string) bool {
		for _, f := range all {
			if f == name || strings.HasSuffix(f, "/"+name) {
				return true
			}
		}
		return false
	}
	for _, doc := range docFiles(t) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fileNameRE.FindAllStringSubmatch(string(text), -1) {
			if !exists(strings.TrimPrefix(m[1], "./")) {
				t.Errorf("%s names `%s`, which is not in the repository", doc, m[1])
			}
		}
	}
}

// goNamesRE matches a Go file named in backticks and the parenthesis that
// follows it, which names what to look for there: "`decide.go` (`decide`,
// `inProgress`)".
var goNamesRE = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go)` \\(([^)]*)\\)")

var identRE = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*)`")

// TestIdentifiersNamed checks that each identifier a document names in
// the parenthesis after a Go file (`seal/store.go` (`Store.seal`)) occurs
// in that file, each part of a dotted name, so that a rename or a move
// shows here.
func TestIdentifiersNamed(t *testing.T) {
	for _, doc := range docFiles(t) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goNamesRE.FindAllStringSubmatch(string(text), -1) {
			idents := identsOf(t, filepath.Join("..", filepath.FromSlash(m[1])))
			if idents == nil {
				continue // not a path from the root: TestFilesNamed checks it
			}
			for _, n := range identRE.FindAllStringSubmatch(m[2], -1) {
				if fileNameRE.MatchString(n[0]) {
					continue // a file, not an identifier
				}
				for _, part := range strings.Split(n[1], ".") {
					if !idents[part] {
						t.Errorf("%s names `%s` in `%s`, which has no %s", doc, n[1], m[1], part)
					}
				}
			}
		}
	}
}

// identsOf returns the identifiers of a Go file, nil when there is none.
func identsOf(t *testing.T, name string) map[string]bool {
	if _, err := os.Stat(name); err != nil {
		return nil
	}
	f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	idents := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			idents[id.Name] = true
		}
		return true
	})
	return idents
}

func docFiles(t *testing.T) []string {
	var docs []string
	for _, g := range namingDocs {
		m, err := filepath.Glob(g)
		if err != nil || len(m) == 0 {
			t.Fatalf("no document %s", g)
		}
		docs = append(docs, m...)
	}
	return docs
}
