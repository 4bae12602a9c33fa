// Command upstream is the trivial API every proxy contender fronts, and the
// "upstream directly" contender: POST /charges counts one execution per
// Idempotency-Key (or X-Idempotency-Key) and answers ~40 B of JSON.
package main

import (
	"flag"

	"github.com/idem-dev/idem/bench/internal/app"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18080", "address to listen on")
	flag.Parse()
	var c app.Counter
	app.Serve(app.Server(*listen, app.Handler(&c)))
}
