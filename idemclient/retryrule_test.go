package idemclient

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// retryVector is one answer of clients/testdata/retry.json, the retry rule
// the Go and TypeScript clients share.
type retryVector struct {
	Name    string            `json:"name"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Verdict string            `json:"verdict"`
	Kind    string            `json:"kind"`
}

func readRetryVectors(t *testing.T) []retryVector {
	t.Helper()
	b, err := os.ReadFile("../clients/testdata/retry.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []retryVector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) < 50 {
		t.Fatalf("%d vectors: the file lost some", len(doc.Vectors))
	}
	return doc.Vectors
}

var verdictNames = map[verdict]string{final: "final", retry: "retry", running: "wait", conflict: "conflict"}

func TestSharedRetryVectors(t *testing.T) {
	t.Parallel()
	for _, v := range readRetryVectors(t) {
		res := &http.Response{StatusCode: v.Status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(v.Body))}
		for k, val := range v.Headers {
			res.Header.Set(k, val)
		}
		got, kind := classify(res, []byte(v.Body))
		if verdictNames[got] != v.Verdict || kind != v.Kind {
			t.Errorf("%s: %s %q, want %s %q", v.Name, verdictNames[got], kind, v.Verdict, v.Kind)
		}
	}
}
