package docs

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the repository's root module; the other
// modules (rpc, bench, examples/routers, trigger/temporal) sit under it at
// their directory's path, so an import path below it names a directory.
const module = "github.com/idem-dev/idem"

// TestTreeTable checks ARCHITECTURE.md's tree table against the tree: every
// Go package of every module is named by a row (by its path, a brace list
// such as store/internal/{expiry,packed}, or a <name> segment standing for any
// one directory), every row names something that exists, and every path in
// backticks in the "who imports it" column is a package that imports (in
// its non-test files) each Go package of the row.
func TestTreeTable(t *testing.T) {
	pkgs := goPackages(t, "..")
	rows := treeRows(t, "ARCHITECTURE.md")
	for _, err := range checkTree(rows, pkgs) {
		t.Error(err)
	}
}

// A row of the tree table: the patterns of its first column and of its
// last, and the text of the second.
type row struct {
	line      int
	where     []string // directory patterns, "." for the root
	what      string
	importers []string // directory patterns of the packages said to import the row's
}

// treeRows reads the table under "## The tree" in the named file.
func treeRows(t *testing.T, name string) []row {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## The tree"
			continue
		case !in || !strings.HasPrefix(line, "|"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "where" {
			continue
		}
		rows = append(rows, row{line: n, where: ticked(cells[0]), what: cells[1], importers: ticked(cells[len(cells)-1])})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no tree table under \"## The tree\"", name)
	}
	return rows
}

var tickedRE = regexp.MustCompile("`([^`]+)`")

// ticked returns the paths in backticks of a cell, brace lists expanded,
// as directories relative to the repository ("/" is the root, ".").
func ticked(cell string) []string {
	var out []string
	for _, m := range tickedRE.FindAllStringSubmatch(cell, -1) {
		for _, p := range expand(m[1]) {
			p = strings.TrimSuffix(p, "/")
			if p == "" {
				p = "."
			}
			out = append(out, p)
		}
	}
	return out
}

// expand expands the first brace list of p, recursively.
func expand(p string) []string {
	open := strings.IndexByte(p, '{')
	end := strings.IndexByte(p, '}')
	if open < 0 || end < open {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[open+1:end], ",") {
		out = append(out, expand(p[:open]+alt+p[end+1:])...)
	}
	return out
}

// matches says whether directory dir is named by pattern, in which a
// segment <name> stands for any one directory.
func matches(pattern, dir string) bool {
	ps, ds := strings.Split(pattern, "/"), strings.Split(dir, "/")
	if len(ps) != len(ds) {
		return false
	}
	for i := range ps {
		if ps[i] != ds[i] && !(strings.HasPrefix(ps[i], "<") && strings.HasSuffix(ps[i], ">")) {
			return false
		}
	}
	return true
}

// goPackages maps each directory under root holding Go files (test files
// too) to the repository's packages its non-test files import, as
// directories. It skips hidden directories, testdata and node_modules, as
// the go command does.
func goPackages(t *testing.T, root string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	fset := token.NewFileSet()
	for _, p := range goFiles(t, root) {
		dir := path.Dir(p)
		if _, ok := pkgs[dir]; !ok {
			pkgs[dir] = nil
		}
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(p)), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			var d string
			switch {
			case ip == module:
				d = "."
			case strings.HasPrefix(ip, module+"/"):
				d = strings.TrimPrefix(ip, module+"/")
			default:
				continue
			}
			if !slices.Contains(pkgs[dir], d) {
				pkgs[dir] = append(pkgs[dir], d)
			}
		}
	}
	return pkgs
}

// goFiles returns the Go files under root (test files too), as slash
// paths relative to it, "." for root's own directory. It skips hidden
// directories, testdata and node_modules, as the go command does, and
// the directories named in skip (relative to root).
func goFiles(t *testing.T, root string, skip ...string) []string {
	return repoFiles(t, root, ".go", skip...)
}

// repoFiles returns the files under root whose names end in suffix, as
// goFiles says.
func repoFiles(t *testing.T, root, suffix string, skip ...string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || slices.Contains(skip, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, suffix) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkTree returns what the rows say that the packages contradict.
func checkTree(rows []row, pkgs map[string][]string) []string {
	var errs []string
	named := func(dir string) bool {
		for _, r := range rows {
			for _, p := range r.where {
				if matches(p, dir) {
					return true
				}
			}
		}
		return false
	}
	var dirs []string
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		if !named(dir) {
			errs = append(errs, "ARCHITECTURE.md: the tree table names no row for package `"+show(dir)+"`")
		}
	}
	// of returns the packages a pattern names.
	of := func(pattern string) []string {
		var out []string
		for _, dir := range dirs {
			if matches(pattern, dir) {
				out = append(out, dir)
			}
		}
		return out
	}
	for _, r := range rows {
		var rowPkgs []string
		for _, p := range r.where {
			got := of(p)
			if len(got) == 0 && !isDir(p) {
				errs = append(errs, "ARCHITECTURE.md:"+strconv.Itoa(r.line)+": `"+show(p)+"` does not exist")
			}
			rowPkgs = append(rowPkgs, got...)
		}
		for _, imp := range r.importers {
			importers := of(imp)
			if len(importers) == 0 {
				errs = append(errs, "ARCHITECTURE.md:"+strconv.Itoa(r.line)+": importer `"+show(imp)+"` is not a Go package")
				continue
			}
			for _, p := range rowPkgs {
				if !slices.ContainsFunc(importers, func(i string) bool { return slices.Contains(pkgs[i], p) }) {
					errs = append(errs, "ARCHITECTURE.md:"+strconv.Itoa(r.line)+": says `"+show(imp)+"` imports `"+show(p)+"`; "+importedBy(pkgs, p))
				}
			}
		}
	}
	return errs
}

// importedBy says which packages import dir outside their tests.
func importedBy(pkgs map[string][]string, dir string) string {
	var by []string
	for d, imps := range pkgs {
		if slices.Contains(imps, dir) {
			by = append(by, show(d))
		}
	}
	if len(by) == 0 {
		return "no package imports it outside tests"
	}
	slices.Sort(by)
	return "only " + strings.Join(by, ", ") + " import it outside tests"
}

func show(dir string) string {
	if dir == "." {
		return "/"
	}
	return dir
}

func isDir(p string) bool {
	fi, err := os.Stat(filepath.Join("..", filepath.FromSlash(path.Clean(p))))
	return err == nil && fi.IsDir()
}
