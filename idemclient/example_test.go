package idemclient_test

import (
	"errors"
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
func ExampleTransport() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	charges := 0
	api := httptest.NewServer(idemhttp.Middleware(eng, idemhttp.Options{SharedAnonymousScope: true})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { charges++; fmt.Fprintf(w, "charge %d", charges) })))
	defer api.Close()

	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	outbox, _ := idemclient.OpenOutbox(dir)
	client := &http.Client{Transport: &idemclient.Transport{Outbox: outbox}}

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

// A request that got no answer is sent again with the key from the error,
// so the server replays it instead of running it twice.
func ExampleError() {
	eng := idem.New(memory.New(), idem.Policy{})
	defer eng.Close()
	charges := 0
	api := httptest.NewServer(idemhttp.Middleware(eng, idemhttp.Options{SharedAnonymousScope: true})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { charges++; fmt.Fprintf(w, "charge %d", charges) })))
	defer api.Close()

	// The network loses the answer of the only attempt.
	lossy := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		res, err := http.DefaultTransport.RoundTrip(r)
		if err == nil {
			res.Body.Close()
			err = errors.New("connection reset by peer")
		}
		return nil, err
	})
	client := &http.Client{Transport: &idemclient.Transport{Base: lossy, MaxAttempts: 1}}
	_, err := client.Post(api.URL+"/charges", "application/json", strings.NewReader(`{"amount":1000}`))
	var e *idemclient.Error
	if errors.As(err, &e) {
		fmt.Println("gave up:", errors.Is(err, idemclient.ErrGaveUp), "may have run:", e.MayHaveRun)
	}

	client = &http.Client{Transport: &idemclient.Transport{}}
	req, _ := http.NewRequest("POST", api.URL+"/charges", strings.NewReader(`{"amount":1000}`))
	req.Header.Set("Idempotency-Key", e.Key)
	res, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(string(body), "replayed:", idemclient.Replayed(res))
	// Output:
	// gave up: true may have run: true
	// charge 1 replayed: true
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The mobile app's 409 DUPLICATE_OPERATION, read as idem's payload_mismatch.
func ExampleProblemKind() {
	h := http.Header{"Content-Type": {"application/json"}}
	body := `{"success":false,"error":{"code":"DUPLICATE_OPERATION","details":{"conflictType":"payload_mismatch"}}}`
	fmt.Println(idemclient.ProblemKind(h, []byte(body)))
	// Output: payload_mismatch
}

// A session token of the app's own is kept out of the outbox along with
// the default credentials, so that a stolen phone or a backup gives none
// of them away; Authorize puts them back when the request is sent again.
func ExampleTransport_secretHeaders() {
	api := httptest.NewServer(http.NotFoundHandler())
	api.Close() // the API is out of reach: the request waits in the outbox

	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	outbox, _ := idemclient.OpenOutbox(dir)
	client := &http.Client{Transport: &idemclient.Transport{
		Outbox:        outbox,
		MaxAttempts:   1,
		SecretHeaders: append(idemclient.DefaultSecretHeaders(), "X-Session-Token"),
	}}

	req, _ := http.NewRequest("POST", api.URL+"/charges", strings.NewReader(`{"amount":1000}`))
	req.Header.Set("Idempotency-Key", "order-42")
	req.Header.Set("Authorization", "Bearer sk_live_1")
	req.Header.Set("X-Session-Token", "s3cr3t")
	req.Header.Set("X-User-ID", "u_42")
	_, err := client.Do(req)
	fmt.Println("gave up:", errors.Is(err, idemclient.ErrGaveUp))

	pending, _ := outbox.List()
	for _, p := range pending {
		fmt.Printf("stored: key %s, X-User-ID %q, Authorization %q, X-Session-Token %q\n",
			p.Key, p.Header.Get("X-User-ID"), p.Header.Get("Authorization"), p.Header.Get("X-Session-Token"))
	}
	// Output:
	// gave up: true
	// stored: key order-42, X-User-ID "u_42", Authorization "", X-Session-Token ""
}
