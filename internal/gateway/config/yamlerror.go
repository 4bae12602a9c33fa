package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	notFound = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)
	// cannotUnmarshal is the YAML library's type error: "line 2: cannot
	// unmarshal !!str `POST /c...` into []config.Route".
	cannotUnmarshal = regexp.MustCompile("^line (\\d+): cannot unmarshal (!!\\w+)(?: `(.*)`)? into (\\S+)$")
	// lineMsg is a message of our own unmarshalers: "line 2: bad duration".
	lineMsg = regexp.MustCompile(`^line (\d+): (.*)$`)
)

// unquotedColon finds a line whose plain value holds ": " or ends in ":"
// ("store: memory:"), which YAML reads as a second mapping.
var unquotedColon = regexp.MustCompile(`^\s*(?:-\s+)?[\w.-]+:\s+([^"'\s{\[#|>][^#]*?:)(?:\s|$)`)

// yamlError rewrites the YAML library's messages into the user's terms,
// naming the field: unknown fields ("field lisen not found in type
// config.Config"), values of the wrong kind ("cannot unmarshal !!str into
// []config.Route" becomes "routes: expected a list of routes, got a
// string"), and a value that needs quotes.
func yamlError(err error, doc []byte) error {
	var root yaml.Node
	_ = yaml.Unmarshal(doc, &root) // the same document: it parses as a tree
	fields := valuesOf(&root)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		msg := err.Error()
		if strings.Contains(msg, "mapping values are not allowed") {
			where := ""
			for i, line := range strings.Split(string(doc), "\n") {
				if unquotedColon.MatchString(line) {
					where = fmt.Sprintf("line %d: %s: ", i+1, strings.TrimSpace(line))
					break
				}
			}
			return fmt.Errorf("%s%s: a value that contains \": \" or ends in \":\" must be quoted, e.g. store: \"memory:\"; a nested mapping goes in braces, e.g. fingerprint: {fields: [amount]}", where, msg)
		}
		if m := lineMsg.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			if f := fields.named(line, m[2]); f != "" {
				return fmt.Errorf("line %d: %s: %s", line, f, m[2])
			}
		}
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		if sm := notFound.FindStringSubmatch(m); sm != nil {
			msgs[i] = fmt.Sprintf("line %s: unknown field %q", sm[1], sm[2])
		} else if sm := cannotUnmarshal.FindStringSubmatch(m); sm != nil {
			line, _ := strconv.Atoi(sm[1])
			msgs[i] = fmt.Sprintf("line %d: %s", line, fields.wrongKind(line, sm[2], sm[3], sm[4]))
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// value is a value node of the document and the field it is the value of,
// as the user writes it: routes[0].fingerprint.
type value struct {
	path string
	node *yaml.Node
}

type values []value

// valuesOf lists every value of the document, parents before children.
func valuesOf(root *yaml.Node) values {
	var out values
	var walk func(path string, n *yaml.Node)
	walk = func(path string, n *yaml.Node) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				out = append(out, value{"", c})
				walk("", c)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				out = append(out, value{p, n.Content[i+1]})
				walk(p, n.Content[i+1])
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				out = append(out, value{p, c})
				walk(p, c)
			}
		}
	}
	walk("", root)
	return out
}

// wrongKind words a type error: the field, what it takes, what it got, and
// how to write it.
func (vs values) wrongKind(line int, tag, shown, goType string) string {
	var v *value
	for i := range vs {
		n := vs[i].node
		if n.Line != line || n.ShortTag() != tag {
			continue
		}
		if n.Kind == yaml.ScalarNode && shown != "" {
			if cut, ok := strings.CutSuffix(shown, "..."); !(ok && strings.HasPrefix(n.Value, cut)) && n.Value != shown {
				continue
			}
		}
		v = &vs[i]
		break
	}
	field, got := "a value", kindWords(tag)
	if v != nil {
		field = v.path
		if field == "" {
			field = "the file"
		}
		if v.node.Kind == yaml.ScalarNode {
			got += fmt.Sprintf(" (%q)", v.node.Value)
		}
	} else if shown != "" {
		got += fmt.Sprintf(" (%q)", shown)
	}
	want, ok := typeWords[goType]
	if !ok {
		want = "a value of another kind"
	}
	msg := fmt.Sprintf("%s: expected %s, got %s", field, want, got)
	if v != nil {
		msg += hint(goType, tag, v.node)
	}
	return msg
}

// typeWords says in the user's words what a Go type of the configuration
// takes.
var typeWords = map[string]string{
	"config.Config":               "a mapping of settings (upstream: http://..., routes: ...)",
	"[]config.Route":              "a list of routes",
	"config.Route":                `a route, a mapping such as {match: "POST /charges", key: required}`,
	"config.Policy":               "a mapping of policy settings, such as {profile: ietf, ttl: 24h}",
	"map[string]config.ErrorText": "a mapping from kinds of answer to texts, such as {in_progress: {code: BUSY, message: ...}}",
	"config.ErrorText":            "{code: ..., message: ...}",
	"config.TenantSource":         "{header: NAME}, {authorization: hash} or {cookie: NAME}, with optional: true in a list",
	"string":                      "a string",
	"int":                         "a whole number",
	"bool":                        "true or false",
	"*bool":                       "true or false",
}

func kindWords(tag string) string {
	switch tag {
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	case "!!null":
		return "nothing"
	case "!!timestamp":
		return "a date"
	}
	return tag
}

// hint shows how to write what was meant, for the usual mistakes.
func hint(goType, tag string, n *yaml.Node) string {
	switch {
	case goType == "[]config.Route" && tag == "!!str":
		return fmt.Sprintf("; write routes: [{match: %q}], or one \"- match: ...\" line per route", n.Value)
	case goType == "[]config.Route" && tag == "!!map":
		return "; each route is a list item: put \"- \" before its match"
	case goType == "config.Route" && tag == "!!str":
		return fmt.Sprintf("; write - match: %q", n.Value)
	case goType == "config.Policy" && tag == "!!str":
		if _, err := profile(n.Value); err == nil {
			return fmt.Sprintf("; for a profile, write {profile: %s}", n.Value)
		}
	case goType == "config.Config" && tag == "!!seq":
		return "; settings are not list items: remove the \"- \" before them"
	case goType == "config.ErrorText" && tag == "!!str":
		return fmt.Sprintf("; write {code: ..., message: %q}", n.Value)
	}
	return ""
}

// named returns the field a message of our own unmarshalers at line is
// about: the one whose value the message quotes, else the first on the
// line; "" when the message already starts with the field's name.
func (vs values) named(line int, msg string) string {
	field := ""
	for _, v := range vs {
		if v.node.Line != line || strings.HasSuffix(v.path, "]") {
			continue
		}
		if v.node.Kind == yaml.ScalarNode && strings.Contains(msg, strconv.Quote(v.node.Value)) {
			field = v.path
			break
		}
		if field == "" {
			field = v.path
		}
	}
	last := field[strings.LastIndexByte(field, '.')+1:]
	if field == "" || strings.HasPrefix(msg, last) {
		return ""
	}
	return field
}
