package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, counted from its func
// line to its closing brace, in the code that funcLenScope names.
const maxFuncLines = 60

// funcLenScope names the code held to maxFuncLines: whole packages (a
// directory's non-test files) and single files. These are the parts where
// bugs were found inside long functions (frames zero-filled on recovery, a
// reclaim copying frames into the active segment), so each step of them
// should have a name and fit on a screen.
var funcLenScope = []string{
	"store/file",
	"store/postgres",
	"internal/gateway/dsn",
	"store/storetest/skew.go",
	"store/storetest/skewscenario.go",
	"store/storetest/engineskew.go",
}

// TestFunctionLength fails on a function longer than maxFuncLines in
// funcLenScope, so that a long function is split into named steps when it
// is written rather than when a bug is found in it.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range scopeFiles(t, funcLenScope) {
		for _, long := range longFuncs(t, fset, p, maxFuncLines) {
			t.Error(long)
		}
	}
}

// scopeFiles returns the non-test Go files that scope names, relative to
// the repository's root.
func scopeFiles(t *testing.T, scope []string) []string {
	t.Helper()
	var files []string
	for _, s := range scope {
		if strings.HasSuffix(s, ".go") {
			files = append(files, s)
			continue
		}
		matches, err := filepath.Glob(filepath.Join("..", filepath.FromSlash(s), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(matches) == 0 {
			t.Fatalf("%s: no Go files; fix funcLenScope", s)
		}
		for _, m := range matches {
			if !strings.HasSuffix(m, "_test.go") {
				files = append(files, s+"/"+filepath.Base(m))
			}
		}
	}
	return files
}

// longFuncs returns a line for each function of the named file that is
// longer than max lines.
func longFuncs(t *testing.T, fset *token.FileSet, p string, max int) []string {
	t.Helper()
	f, err := parser.ParseFile(fset, filepath.Join("..", filepath.FromSlash(p)), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		if n := end.Line - start.Line + 1; n > max {
			out = append(out, fmt.Sprintf("%s:%d: %s is %d lines, over %d: split it into named steps", p, start.Line, funcName(fn), n, max))
		}
	}
	return out
}

// funcName returns a function's name, with its receiver's type for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch ix := typ.(type) {
	case *ast.IndexExpr:
		typ = ix.X
	case *ast.IndexListExpr:
		typ = ix.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
