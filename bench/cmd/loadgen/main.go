// Command loadgen drives one running server with one of the harness's load
// scenarios and prints what it measured: the load side of profile.sh.
package main

import (
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/idem-dev/idem/bench/internal/load"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18081", "base URL of the server")
	header := flag.String("key-header", "Idempotency-Key", "header carrying the key")
	scenario := flag.String("scenario", "first", "first, replay or mix")
	d := flag.Duration("duration", 10*time.Second, "how long to send")
	conns := flag.Int("c", 64, "concurrent connections")
	knownN := flag.Int("known-keys", 1000, "keys the replay and mix scenarios retry")
	flag.Parse()
	req := load.Request{URL: *url, KeyHeader: *header}
	client := load.NewClient(*conns)
	known := load.Known{Keys: load.NewKeys(), N: uint64(*knownN)}
	sc := load.Scenario(*scenario)
	if sc != load.First {
		if m := load.Attack(client, load.Finite(req, known), 16, 0); m.Success < 1 {
			log.Fatalf("preload: %v %v", m.StatusCodes, m.Errors)
		}
	}
	m := load.Attack(client, load.Targeter(sc, req, load.NewKeys(), known), *conns, *d)
	fmt.Printf("%s: %.0f req/s, p50 %s, p99 %s, p99.9 %s, statuses %v\n", sc, m.Throughput,
		m.Latencies.P50, m.Latencies.P99, m.Latencies.Quantile(0.999), m.StatusCodes)
}
