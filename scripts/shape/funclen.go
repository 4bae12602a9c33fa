//go:build ignore

// funclen lists the longest functions (lines from func to closing brace) of
// the Go files in the given directories, test files skipped.
//
//	go run scripts/shape/funclen.go -n 10 . ./idemhttp
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type fn struct {
	name, file string
	lines      int
}

func main() {
	n := flag.Int("n", 10, "how many to list per directory")
	flag.Parse()
	for _, dir := range flag.Args() {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var all []fn
		for _, p := range pkgs {
			for path, f := range p.Files {
				for _, d := range f.Decls {
					d, ok := d.(*ast.FuncDecl)
					if !ok || d.Body == nil {
						continue
					}
					name := d.Name.Name
					if d.Recv != nil {
						name = recv(d.Recv.List[0].Type) + "." + name
					}
					lines := fset.Position(d.End()).Line - fset.Position(d.Pos()).Line + 1
					all = append(all, fn{name, filepath.Base(path), lines})
				}
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].lines > all[j].lines })
		if len(all) > *n {
			all = all[:*n]
		}
		fmt.Println(dir)
		for _, f := range all {
			fmt.Printf("  %4d  %-40s %s\n", f.lines, f.name, f.file)
		}
	}
}

func recv(t ast.Expr) string {
	switch x := t.(type) {
	case *ast.StarExpr:
		return recv(x.X)
	case *ast.IndexExpr:
		return recv(x.X)
	case *ast.IndexListExpr:
		return recv(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}
