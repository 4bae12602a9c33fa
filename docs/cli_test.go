package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCLIList checks that the tree table's cmd/idem row lists the commands
// cmd/idem runs, no more and no fewer: the cases of Main.run, less the
// spellings of help and version as flags and the commands marked hidden.
func TestCLIList(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../cmd/idem/main.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../cmd/idem/main.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	var commands []string
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "run" || fn.Recv == nil {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			if strings.Contains(lines[fset.Position(cc.Pos()).Line-1], "hidden") {
				return false
			}
			for _, e := range cc.List {
				lit, ok := e.(*ast.BasicLit)
				if !ok {
					continue
				}
				name, _ := strconv.Unquote(lit.Value)
				if !strings.HasPrefix(name, "-") && name != "help" {
					commands = append(commands, name)
				}
			}
			return false
		})
		return false
	})
	if len(commands) == 0 {
		t.Fatal("cmd/idem/main.go: found no commands in Main.run")
	}
	var listed []string
	for _, r := range treeRows(t, "ARCHITECTURE.md") {
		if slices.Contains(r.where, "cmd/idem") {
			for _, m := range tickedRE.FindAllStringSubmatch(r.what, -1) {
				listed = append(listed, strings.Fields(m[1])[0])
			}
		}
	}
	for _, c := range commands {
		if !slices.Contains(listed, c) {
			t.Errorf("ARCHITECTURE.md: the cmd/idem row does not list `%s`, a command of cmd/idem", c)
		}
	}
	for _, c := range listed {
		if !slices.Contains(commands, c) {
			t.Errorf("ARCHITECTURE.md: the cmd/idem row lists `%s`, which cmd/idem does not run", c)
		}
	}
}
