// Command plainproxy is the floor for a gateway: httputil.ReverseProxy to the
// upstream with nothing else, its transport allowed as many idle
// connections as the load has (the default 2 per host would leave most
// sockets in TIME_WAIT and measure that instead).
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/idem-dev/idem/bench/internal/app"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "address to listen on")
	upstream := flag.String("upstream", "http://127.0.0.1:18080", "upstream URL")
	idle := flag.Int("max-idle-per-host", 256, "idle upstream connections kept per host")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = *idle
	tr.MaxIdleConnsPerHost = *idle
	p := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host
		},
		Transport: tr,
	}
	app.Serve(app.Server(*listen, p))
}
