// Command durableproxy is the durable anchor of the gateway's first calls:
// httputil.ReverseProxy with synced Pebble WAL appends per request
// (internal/anchor), two (-appends 2: before forwarding and after the
// answer) or one (-appends 1: the request's and the answer's bytes after
// the answer), on a Pebble DB in a directory of its own.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/url"
	"os"

	"github.com/cockroachdb/pebble"

	"github.com/idem-dev/idem/bench/internal/anchor"
	"github.com/idem-dev/idem/bench/internal/app"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "address to listen on")
	upstream := flag.String("upstream", "http://127.0.0.1:18080", "upstream URL")
	dir := flag.String("dir", "", "the Pebble DB's directory (default: a new temporary one, removed at exit)")
	idle := flag.Int("max-idle-per-host", 256, "idle upstream connections kept per host")
	appends := flag.Int("appends", 2, "synced appends a request: 2 (before forwarding and after the answer) or 1 (request and answer together, after the answer)")
	flag.Parse()
	if *appends != 1 && *appends != 2 {
		log.Fatalf("-appends %d: want 1 or 2", *appends)
	}
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "durableproxy-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	db, err := pebble.Open(*dir, &pebble.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// The transport as the plain proxy's (cmd/plainproxy), so that the two
	// differ by the log alone.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = *idle
	tr.MaxIdleConnsPerHost = *idle
	app.Serve(app.Server(*listen, anchor.New(u, tr, db, anchor.Appends(*appends))))
}
