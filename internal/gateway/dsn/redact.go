package dsn

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// hidden replaces every secret Redact finds.
const hidden = "xxxxx"

// secretParam is a parameter whose value is a secret, in a URL's query
// (?password=...&) or in a key-word DSN (host=h password='p q' dbname=d):
// PostgreSQL's password and sslpassword, the spellings other drivers and
// people use, and the secret keys of S3 and DynamoDB, should one be
// written into a DSN. The name must start the text or follow a separator,
// so that idem_password or a path is not taken for one; the value ends at
// the next separator, or is PostgreSQL's single-quoted form.
var secretParam = regexp.MustCompile(`(?i)((?:^|[\s?&;,"'(])(?:[a-z0-9_.-]*(?:password|passwd|secret|token|credential)[a-z0-9_.-]*|pass|pwd|auth|secret_?key|aws_secret_access_key|sig|signature|x-amz-signature|x-amz-security-token)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&;#"',)]*)`)

// Redact hides every secret a DSN may hold: the password of a URL's user
// information (postgres://u:PASS@h, redis://:PASS@h, also when the rest
// does not parse), secret query parameters (?password=, ?sslpassword=,
// ?secret_key=, ...) and the password of a key-word DSN (host=h
// password=PASS). It works on any text that quotes a DSN, such as an error
// message, and leaves text without one as it is. Every place that prints a
// DSN or a store's error goes through it (or a Redactor, which also hides
// the secrets of a known DSN wherever they appear).
func Redact(s string) string {
	// Every log line of the gateway passes here: the common text without
	// a URL or a parameter costs two scans, no regular expression.
	if strings.Contains(s, "://") {
		s = redactUserinfo(s)
	}
	if strings.IndexByte(s, '=') >= 0 {
		s = secretParam.ReplaceAllString(s, "${1}"+hidden)
	}
	return s
}

// redactUserinfo hides the password of each scheme://user:PASS@ in s. The
// password runs to the last @ before the query, so that an @ or / in it
// (unescaped, as people write them) is hidden whole.
func redactUserinfo(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			if b.Len() == 0 {
				return s
			}
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexAny(s, " \t\r\n\"'`<>?#")
		if end < 0 {
			end = len(s)
		}
		auth := s[:end]
		at := strings.LastIndex(auth, "@")
		if at < 0 {
			continue
		}
		c := strings.Index(auth[:at], ":")
		if c < 0 || auth[c+1:at] == "PASSWORD" { // the placeholder of the examples
			continue
		}
		b.WriteString(auth[:c+1])
		b.WriteString(hidden)
		s = s[at:]
	}
}

// secretsOf returns the secrets written in dsn, as written and decoded, so
// that a Redactor finds them in any text, also where a driver quotes them
// outside a DSN.
func secretsOf(dsn string) []string {
	var out []string
	add := func(v string) {
		v = strings.Trim(v, "'")
		for _, w := range []string{v, unescape(v)} {
			// Shorter secrets would hide pieces of words all over a log
			// line; Redact still hides them inside a DSN.
			if len(w) >= 4 && !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if end := strings.IndexAny(rest, "?#"); end >= 0 {
			rest = rest[:end]
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
	}
	for _, m := range secretParam.FindAllStringSubmatch(dsn, -1) {
		add(m[2])
	}
	return out
}

func unescape(v string) string {
	if u, err := url.QueryUnescape(v); err == nil {
		return u
	}
	return v
}

// A Redactor hides the secrets of the DSNs it was made for wherever they
// appear in a text (a driver's error may quote a password outside any
// DSN), and every DSN-shaped secret as Redact does.
type Redactor struct{ secrets []string }

// NewRedactor returns the Redactor of dsns.
func NewRedactor(dsns ...string) *Redactor {
	r := &Redactor{}
	for _, d := range dsns {
		r.secrets = append(r.secrets, secretsOf(d)...)
	}
	// The longest first, so that a secret that contains another is hidden
	// whole.
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// String returns s with every secret hidden.
func (r *Redactor) String(s string) string {
	s = Redact(s)
	if r == nil {
		return s
	}
	for _, sec := range r.secrets {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, hidden)
		}
	}
	return s
}

// Error returns err with its message redacted; errors.Is and errors.As
// still see err. nil stays nil.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := r.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Handler returns h with every message and attribute (strings, errors,
// groups, and anything printed through String or Error) redacted, so that
// no log line of the process shows a secret of r's DSNs, whoever logs it.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	return &redactHandler{h: h, r: r}
}

type redactHandler struct {
	h slog.Handler
	r *Redactor
}

func (h *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a)
	}
	return &redactHandler{h: h.h.WithAttrs(red), r: h.r}
}

func (h *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{h: h.h.WithGroup(name), r: h.r}
}

func (h *redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(h.r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, ga := range g {
			red[i] = h.attr(ga)
		}
		a.Value = slog.GroupValue(red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			a.Value = slog.StringValue(h.r.String(x.Error()))
		case fmt.Stringer:
			a.Value = slog.StringValue(h.r.String(x.String()))
		default:
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}
