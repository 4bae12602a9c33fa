//go:build ignore

// apisize counts the exported names of Go packages: top-level functions,
// types, constants and variables, and the exported methods and fields of
// exported types. Test files are skipped.
//
//	go run scripts/shape/apisize.go . ./idemhttp ./idemclient
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
)

func main() {
	fmt.Printf("%-28s %6s %6s %6s %6s %6s %6s\n", "package", "func", "type", "const", "var", "method", "total")
	for _, dir := range os.Args[1:] {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if os.Getenv("APISIZE_LIST") != "" {
			for _, p := range pkgs {
				for _, f := range p.Files {
					ast.Inspect(f, func(n ast.Node) bool {
						switch d := n.(type) {
						case *ast.FuncDecl:
							if d.Recv == nil && d.Name.IsExported() {
								fmt.Println(dir, d.Name.Name)
							}
							return false
						case *ast.TypeSpec:
							if d.Name.IsExported() {
								fmt.Println(dir, d.Name.Name)
							}
							return false
						case *ast.ValueSpec:
							for _, id := range d.Names {
								if id.IsExported() {
									fmt.Println(dir, id.Name)
								}
							}
							return false
						}
						return true
					})
				}
			}
			continue
		}
		names := make([]string, 0, len(pkgs))
		for n := range pkgs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			var fn, ty, co, va, me int
			for _, f := range pkgs[n].Files {
				for _, d := range f.Decls {
					switch d := d.(type) {
					case *ast.FuncDecl:
						if !d.Name.IsExported() {
							continue
						}
						if d.Recv == nil {
							fn++
						} else if recvExported(d.Recv) {
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
									if !id.IsExported() {
										continue
									}
									if d.Tok == token.CONST {
										co++
									} else {
										va++
									}
								}
							}
						}
					}
				}
			}
			fmt.Printf("%-28s %6d %6d %6d %6d %6d %6d\n", dir, fn, ty, co, va, me, fn+ty+co+va+me)
		}
	}
}

func recvExported(fl *ast.FieldList) bool {
	t := fl.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
