//go:build ignore

// shape measures the shape of Go packages, test files skipped:
//
//	go run scripts/shape/shape.go api DIR...       exported names per package
//	go run scripts/shape/shape.go funcs N DIR...   the N longest functions per package
//
// api counts top-level functions, types, constants and variables, and the
// methods of exported types. funcs counts a function's lines from func to
// its closing brace.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: shape api DIR... | shape funcs N DIR...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "api":
		fmt.Printf("%-24s %6s %6s %6s %6s %6s %6s\n", "package", "func", "type", "const", "var", "method", "total")
		for _, dir := range os.Args[2:] {
			api(dir)
		}
	case "funcs":
		n, err := strconv.Atoi(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, "funcs: N:", err)
			os.Exit(2)
		}
		for _, dir := range os.Args[3:] {
			funcs(dir, n)
		}
	}
}

// files parses the non-test Go files of dir.
func files(dir string) (*token.FileSet, map[string]*ast.File) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := map[string]*ast.File{}
	for _, p := range pkgs {
		for path, f := range p.Files {
			out[path] = f
		}
	}
	return fset, out
}

func api(dir string) {
	_, fs := files(dir)
	var fn, ty, co, va, me int
	for _, f := range fs {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				switch {
				case !d.Name.IsExported():
				case d.Recv == nil:
					fn++
				case ast.IsExported(recv(d.Recv.List[0].Type)):
					me++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							ty++
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							switch {
							case !id.IsExported():
							case d.Tok == token.CONST:
								co++
							default:
								va++
							}
						}
					}
				}
			}
		}
	}
	fmt.Printf("%-24s %6d %6d %6d %6d %6d %6d\n", dir, fn, ty, co, va, me, fn+ty+co+va+me)
}

func funcs(dir string, n int) {
	type fn struct {
		name, file string
		lines      int
	}
	fset, fs := files(dir)
	var all []fn
	for path, f := range fs {
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
	sort.Slice(all, func(i, j int) bool { return all[i].lines > all[j].lines })
	fmt.Println(dir)
	for _, f := range all[:min(n, len(all))] {
		fmt.Printf("  %4d  %-40s %s\n", f.lines, f.name, f.file)
	}
}

// recv names a receiver's type.
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
