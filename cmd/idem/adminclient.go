package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"golang.org/x/term"
)

// adminFlags are the flags of the commands that can work through a
// running gateway's admin API instead of opening the store themselves
// (which a file store, locked by the gateway, does not allow).
type adminFlags struct {
	url, token *string
}

func (m *Main) addAdminFlags(fs *flag.FlagSet) adminFlags {
	return adminFlags{
		url: fs.String("admin", "", "work through the running gateway whose admin listener is at this `URL`\n"+
			"(e.g. http://127.0.0.1:9090) instead of opening the store; default $IDEM_ADMIN_URL"),
		token: fs.String("admin-token", "", "the gateway's admin_token (default $IDEM_ADMIN_TOKEN)"),
	}
}

// client returns the admin API client, or nil when no admin URL is set.
func (f adminFlags) client(m *Main) (*adminClient, error) {
	u := *f.url
	if u == "" {
		u = m.Getenv("IDEM_ADMIN_URL")
	}
	if u == "" {
		return nil, nil
	}
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	base, err := url.Parse(u)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("--admin %q: want the admin listener's URL, e.g. http://127.0.0.1:9090", u)
	}
	tok := *f.token
	if tok == "" {
		tok = m.Getenv("IDEM_ADMIN_TOKEN")
	}
	if tok == "" {
		return nil, errors.New("--admin needs the gateway's admin token: --admin-token or IDEM_ADMIN_TOKEN")
	}
	return &adminClient{base: base, token: tok, http: &http.Client{}}, nil
}

// adminClient calls a gateway's admin API.
type adminClient struct {
	base  *url.URL
	token string
	http  *http.Client
}

// do sends the request and returns the response when its status is 200;
// otherwise the problem's detail as an error.
func (c *adminClient) do(ctx context.Context, method, path string, q url.Values) (*http.Response, error) {
	u := c.base.ResolveReference(&url.URL{Path: path, RawQuery: q.Encode()})
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %w", c.base.Redacted(), err)
	}
	if res.StatusCode == http.StatusOK {
		return res, nil
	}
	defer res.Body.Close()
	var p struct{ Detail string }
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if json.Unmarshal(b, &p) != nil || p.Detail == "" {
		p.Detail = strings.TrimSpace(string(b))
	}
	return nil, &adminError{Status: res.StatusCode, Detail: p.Detail}
}

// adminError is a refusal from the admin API.
type adminError struct {
	Status int
	Detail string
}

func (e *adminError) Error() string {
	return fmt.Sprintf("the gateway answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Detail)
}

// inspect prints the record of scope and key.
func (c *adminClient) inspect(ctx context.Context, w io.Writer, scope, key string) error {
	res, err := c.do(ctx, http.MethodGet, "/api/keys", url.Values{"scope": {scope}, "key": {key}})
	if err != nil {
		var ae *adminError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound && strings.HasPrefix(ae.Detail, "no live record") {
			return fmt.Errorf("inspect: no live record for scope %q and key %q in the gateway at %s", scope, key, c.base.Redacted())
		}
		return fmt.Errorf("inspect: %w", err)
	}
	defer res.Body.Close()
	_, err = io.Copy(w, res.Body)
	return err
}

// release frees the key that q names (scope and key, or method, path,
// header and key).
func (c *adminClient) release(ctx context.Context, q url.Values) error {
	res, err := c.do(ctx, http.MethodPost, "/api/keys/release", q)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	res.Body.Close()
	return nil
}

// cleanup runs a cleanup in the gateway, showing its progress on stderr.
func (m *Main) adminCleanup(ctx context.Context, c *adminClient, batch int, dryRun bool) error {
	q := url.Values{"batch": {fmt.Sprint(batch)}}
	if dryRun {
		q.Set("dry_run", "true")
	}
	res, err := c.do(ctx, http.MethodPost, "/api/cleanup", q)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer res.Body.Close()
	where := "the gateway at " + c.base.Redacted()
	if dryRun {
		var r struct{ Expired int }
		if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
			return fmt.Errorf("cleanup --dry-run: %w", err)
		}
		fmt.Fprintf(m.Stdout, "%d expired records in %s (dry run: nothing removed)\n", r.Expired, where)
		return nil
	}
	p := m.progress()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var line struct {
			Removed int
			Done    bool
			Took    string
			Error   string
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("cleanup: the gateway answered %q: %w", sc.Text(), err)
		}
		if !line.Done {
			p.update(line.Removed)
			continue
		}
		p.end()
		if line.Error != "" {
			return fmt.Errorf("cleanup: removed %d records, then: %s", line.Removed, line.Error)
		}
		fmt.Fprintf(m.Stdout, "removed %d expired records through %s in %s\n", line.Removed, where, line.Took)
		return nil
	}
	p.end()
	if err := sc.Err(); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return errors.New("cleanup: the gateway closed the connection before the end; the cleanup may have stopped")
}

// progress reports a count on stderr: one line rewritten in place on a
// terminal, one line per update otherwise (logs, pipes).
type progress struct {
	w     io.Writer
	tty   bool
	shown bool
}

func (m *Main) progress() *progress {
	p := &progress{w: m.Stderr}
	if f, ok := m.Stderr.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	return p
}

func (p *progress) update(removed int) {
	if p.tty {
		fmt.Fprintf(p.w, "\rremoved %d expired records...", removed)
		p.shown = true
		return
	}
	fmt.Fprintf(p.w, "removed %d expired records so far\n", removed)
}

// end finishes the line rewritten in place.
func (p *progress) end() {
	if p.tty && p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// ReleaseCommand frees a key whose outcome is unknown, through a running
// gateway.
type ReleaseCommand struct{ m *Main }

// Run parses flags and releases --scope and --key.
func (c *ReleaseCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.flagSet("release", "release --admin URL [--scope S | --path P [--method M] [--tenant T | --header 'Name: value'...]] --key K\n\n"+
		"Frees a key whose outcome is unknown (the call was started and nothing says whether it\n"+
		"took effect) or whose holder's lease is over: its next request runs the operation again.\n"+
		"A holder whose lease was over but that is still alive and finishes before the next request\n"+
		"reserves the key writes its outcome back: that request then replays it (the key does not\n"+
		"run twice). Check the upstream first. The gateway's admin_token is required. Name the key by its\n"+
		"scope, or by the request as the client sent it: --path and --method, and the headers its\n"+
		"caller is known by (--header 'X-User-ID: alice', --header 'Authorization: Bearer ...'),\n"+
		"and the gateway's routes find the scope.")
	af := c.m.addAdminFlags(fs)
	scope := fs.String("scope", "", "the key's `scope` (see idem inspect -h)")
	key := fs.String("key", "", "the idempotency `key`")
	path := fs.String("path", "", "the request's `path`: the gateway's routes find the scope")
	method := fs.String("method", "POST", "with --path: the request's `method`")
	tenant := fs.String("tenant", "", "with --path: the caller's `tenant` as the tenant source gives it (a header's value)")
	var headers headerFlags
	fs.Var(&headers, "header", "with --path: a request `header` the caller is known by, \"Name: value\" (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("release: unexpected arguments %q", fs.Args())
	}
	k := strings.TrimSpace(*key)
	if k == "" {
		return errors.New("release: --key is required")
	}
	ac, err := af.client(c.m)
	if err != nil {
		return err
	}
	if ac == nil {
		return errors.New("release: --admin URL is required: a key is released through the running gateway")
	}
	q := url.Values{"scope": {*scope}, "key": {k}}
	what := fmt.Sprintf("scope %q", *scope)
	if *path != "" {
		q = url.Values{"path": {*path}, "method": {*method}, "key": {k}}
		switch {
		case len(headers) > 0:
			q["header"] = headers
		default:
			q.Set("tenant", *tenant)
		}
		what = *method + " " + *path
	}
	if err := ac.release(ctx, q); err != nil {
		return err
	}
	fmt.Fprintf(c.m.Stdout, "released key %q (%s): its next request runs the operation again\n", k, what)
	return nil
}

// headerFlags collects repeated --header flags.
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ", ") }

func (h *headerFlags) Set(v string) error {
	if name, _, ok := strings.Cut(v, ":"); !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want \"Name: value\", got %q", v)
	}
	*h = append(*h, v)
	return nil
}
