// Command refmw is the same-stack reference for idem's middleware in
// process: the trivial handler behind internal/refmw (SHA-256 of the body,
// a sync.Map reservation, a buffered replay), the floor idemhttp is
// measured against.
package main

import (
	"flag"

	"github.com/idem-dev/idem/bench/internal/app"
	"github.com/idem-dev/idem/bench/internal/inproc"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "address to listen on")
	flag.Parse()
	var c app.Counter
	app.Serve(app.Server(*listen, inproc.Ref(&c)))
}
