package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// figureRE matches what a measurement looks like in prose: a duration
// below the millisecond, a time or count per operation, a rate, a ratio
// such as 0.74x, a percentage, a count of allocations, a percentile, or
// one figure set against another. A configured value written as the
// configuration spells it (idem_flush_delay=100us) is not matched.
var figureRE = regexp.MustCompile(`(^|[^\w=.])\d[\d.,]*(-\d[\d.,]*)? ?(µs|us|ns)\b` +
	`|\d ?(ms|s) ?(/op|a call|a request|per (call|request|op))` +
	`|\d[\d.,]* ?[a-z]+(/s\b| a second| per second)` +
	`|(^|[^\w.])\d+(\.\d+)?(-\d+(\.\d+)?)?x\b` +
	`|\d[\d.,]*(-\d[\d.,]*)?%` +
	`|\d+ (allocations|allocs)\b` +
	`|\bp(50|90|95|99|999) [\d.]+` +
	`|against (about )?\d[\d.,]*`)

// TestNoFiguresInComments fails on a measured figure in a comment of a
// non-test Go file, in every module but the load harness (bench/, whose
// comments describe the figures it prints). Figures depend on the machine
// and the day they were measured on, and a comment keeps them long after
// they stopped being true: they go in docs/bench/, where they carry their
// date, machine and command, and the comment keeps the reason and names
// the file.
func TestNoFiguresInComments(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range goFiles(t, "..", "bench") {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join("..", filepath.FromSlash(p)), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range f.Comments {
			for _, hit := range figures(fset, g.List) {
				t.Errorf("%s: a measured figure in a comment (%q): move it to docs/bench/ and name the file", hit.pos, hit.text)
			}
		}
	}
}

type figure struct {
	pos  token.Position
	text string
}

// figures returns the figures in the comments of a group, read as one
// text so that a figure broken across lines is found.
func figures(fset *token.FileSet, list []*ast.Comment) []figure {
	var text strings.Builder
	type start struct {
		off int
		pos token.Position
	}
	var starts []start
	for _, c := range list {
		pos := fset.Position(c.Slash)
		body := c.Text
		if strings.HasPrefix(body, "//go:") || strings.HasPrefix(body, "//line ") {
			continue
		}
		body = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSuffix(body, "*/"), "//"), "/*")
		for i, line := range strings.Split(body, "\n") {
			p := pos
			p.Line += i
			starts = append(starts, start{text.Len(), p})
			text.WriteString(strings.TrimSpace(line))
			text.WriteByte(' ')
		}
	}
	var out []figure
	s := text.String()
	for _, m := range figureRE.FindAllStringIndex(s, -1) {
		pos := starts[0].pos
		for _, st := range starts {
			if st.off <= m[0] {
				pos = st.pos
			}
		}
		out = append(out, figure{pos, strings.TrimSpace(s[m[0]:m[1]])})
	}
	return out
}
