package app

import (
	"io"
	"net/http"
	"time"
)

// Paths every contender serves besides the operation.
const (
	PathOperation = "/charges"
	PathCounts    = "/_bench/counts" // GET; ?per_key=1 adds every key's count
	PathReset     = "/_bench/reset"  // POST
	PathHealth    = "/healthz"
)

// Header names the harness uses.
const (
	// HeaderDelay asks the operation to take this long (a Go duration), so
	// that the race scenario's requests overlap.
	HeaderDelay = "X-Bench-Delay"
)

// Handler serves the operation and the harness's paths with c. keyHeaders
// are the headers an idempotency key may arrive in.
func Handler(c *Counter, keyHeaders ...string) http.Handler {
	if len(keyHeaders) == 0 {
		keyHeaders = []string{"Idempotency-Key", "X-Idempotency-Key"}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathOperation, func(w http.ResponseWriter, r *http.Request) {
		// Read the body as a real handler would.
		_, _ = io.Copy(io.Discard, r.Body)
		if d, err := time.ParseDuration(r.Header.Get(HeaderDelay)); err == nil && d > 0 {
			time.Sleep(min(d, 5*time.Second))
		}
		key := ""
		for _, h := range keyHeaders {
			if key = r.Header.Get(h); key != "" {
				break
			}
		}
		body := c.Hit(key)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET "+PathCounts, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(c.JSON(r.URL.Query().Get("per_key") == "1"))
	})
	mux.HandleFunc("POST "+PathReset, func(w http.ResponseWriter, _ *http.Request) {
		c.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// Server returns an http.Server for h with the timeouts of a real service.
func Server(addr string, h http.Handler) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
}
