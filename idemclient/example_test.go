package idemclient_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemclient"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// A client whose requests carry keys and wait in an outbox until answered.
func ExampleNewTransport() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	charges := 0
	api := httptest.NewServer(idemhttp.Middleware(eng, idemhttp.Options{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { charges++; fmt.Fprintf(w, "charge %d", charges) })))
	defer api.Close()

	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	outbox, _ := idemclient.OpenOutbox(dir)
	client := &http.Client{Transport: idemclient.NewTransport(nil, idemclient.WithOutbox(outbox))}

	req, _ := http.NewRequest("POST", api.URL+"/charges", strings.NewReader(`{"amount":1000}`))
	req.Header.Set("Idempotency-Key", "order-42") // one key per user intent
	for range 2 {                                 // the user taps twice
		req.Body = io.NopCloser(strings.NewReader(`{"amount":1000}`))
		res, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(string(body), "replayed:", idemclient.Replayed(res))
	}
	pending, _ := outbox.List()
	fmt.Println("pending:", len(pending))
	// Output:
	// charge 1 replayed: false
	// charge 1 replayed: true
	// pending: 0
}
