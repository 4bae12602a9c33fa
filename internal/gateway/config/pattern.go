package config

import (
	"fmt"
	"strings"

	"github.com/idem-dev/idem/idemhttp"
)

// methods are the request methods a route may name: RFC 9110's, PATCH
// (RFC 5789) and WebDAV's (RFC 4918). ServeMux takes any token as a
// method and compares it case-sensitively, so "POTS" or "post" would be
// accepted and never match a request: the route's protection would be off
// without a word.
var methods = []string{
	"POST", "PUT", "PATCH", "DELETE", "GET", "HEAD", "OPTIONS", "TRACE", "CONNECT",
	"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK",
}

func knownMethod(m string) bool {
	for _, k := range methods {
		if m == k {
			return true
		}
	}
	return false
}

// checkPattern refuses the route patterns ServeMux accepts but which
// cannot mean what was written, naming the fix: an unknown or lower-case
// method, a host part (ServeMux reads "POST/charges" as the host "POST"),
// white space in the path, and a safe method, which the middleware always
// passes through. ServeMux's own parse then catches the rest (wildcards,
// conflicts).
//
// The gateway has no use for host patterns: it forwards every host to one
// upstream, and a request whose Host is not the pattern's would pass
// through unprotected.
func checkPattern(p string) error {
	method, rest, spaced := "", p, false
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		method, rest, spaced = p[:i], strings.TrimLeft(p[i+1:], " \t"), true
	}
	path := rest
	if i := strings.IndexByte(rest, '/'); i > 0 {
		host := rest[:i]
		path = rest[i:]
		if !spaced {
			if m, ok := methodLike(host); ok {
				return fmt.Errorf("no space between method and path; write %q", m+" "+path)
			}
		}
		return fmt.Errorf("%q before the path is read as a host name, and requests for any other host would pass through unprotected; the gateway matches method and path only: write %q",
			host, strings.TrimSpace(method+" "+path))
	} else if i < 0 {
		fix := "/" + rest
		if m, ok := methodLike(rest); ok && !spaced {
			fix = m + " /..."
		} else if method != "" {
			fix = method + " /" + rest
		}
		return fmt.Errorf("the path must start with /; write %q", fix)
	}
	if method != "" {
		up := strings.ToUpper(method)
		switch {
		case !knownMethod(up):
			fix := "one of " + strings.Join(methods[:4], ", ")
			if near := nearestMethod(up); near != "" {
				fix = fmt.Sprintf("%q", near+" "+path)
			}
			return fmt.Errorf("unknown method %q: requests with it never come, so the route would protect nothing; write %s", method, fix)
		case up != method:
			return fmt.Errorf("method %q is not upper-case: methods are case-sensitive, and clients send %s; write %q", method, up, up+" "+path)
		case idemhttp.SafeMethod(method):
			return fmt.Errorf("%s requests always pass through unprotected (they change nothing, so there is nothing to run once); protect the method that does the work, e.g. %q, or remove the route",
				method, "POST "+path)
		}
	}
	if i := strings.IndexAny(path, " \t"); i >= 0 {
		return fmt.Errorf("white space in the path %q never matches a request (clients send it as %%20); remove it or write %%20", path)
	}
	return nil
}

// methodLike says whether s looks like a method written without the space
// after it ("POST", "post", "POTS"), and which one was meant.
func methodLike(s string) (string, bool) {
	up := strings.ToUpper(s)
	if knownMethod(up) {
		return up, true
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') {
			return "", false
		}
	}
	if near := nearestMethod(up); near != "" {
		return near, true
	}
	return "", false
}

// nearestMethod returns the known method one edit (a letter changed, added,
// dropped, or two swapped) away from m, or "".
func nearestMethod(m string) string {
	for _, k := range methods {
		if editDistance(m, k) <= 1 {
			return k
		}
	}
	return ""
}

// editDistance is the optimal string alignment distance of a and b: the
// Levenshtein distance with the swap of two neighbours as one edit.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
