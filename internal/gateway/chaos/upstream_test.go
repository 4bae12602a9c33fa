package chaos

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUpstream: each fault does to the caller what it says, and every
// execution is in the log with the body it meant to answer.
func TestUpstream(t *testing.T) {
	tests := []struct {
		name      string
		f         Faults
		timeout   time.Duration
		delivered bool
		check     func(t *testing.T, res *http.Response, body []byte, err error)
	}{
		{"answers", Faults{}, 5 * time.Second, true, func(t *testing.T, res *http.Response, body []byte, err error) {
			if err != nil || res.StatusCode != 201 || !strings.Contains(string(body), `"key":"k1"`) {
				t.Errorf("%v %v %s", err, res, body)
			}
		}},
		{"slow, the caller waits", Faults{Slow: 1, SlowFor: [2]time.Duration{300 * time.Millisecond}}, 5 * time.Second, true,
			func(t *testing.T, res *http.Response, body []byte, err error) {
				if err != nil || res.StatusCode != 201 {
					t.Errorf("%v %v", err, res)
				}
			}},
		{"slow, the caller gives up", Faults{Slow: 1, SlowFor: [2]time.Duration{500 * time.Millisecond}}, 100 * time.Millisecond, false,
			func(t *testing.T, res *http.Response, body []byte, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%v %v", err, res)
				}
			}},
		{"reset", Faults{Reset: 1}, 5 * time.Second, false, func(t *testing.T, res *http.Response, body []byte, err error) {
			if err == nil {
				t.Errorf("no error: %v %s", res, body)
			}
		}},
		{"cut mid-body", Faults{Cut: 1}, 5 * time.Second, false, func(t *testing.T, res *http.Response, body []byte, err error) {
			if !errors.Is(err, io.ErrUnexpectedEOF) || res.StatusCode != 201 || res.ContentLength != 1000 || len(body) != 500 {
				t.Errorf("%v %v %d bytes", err, res, len(body))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := NewRecorder(time.Second, "")
			u, err := StartUpstream(rec, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", u.URL+"/charges", strings.NewReader(`{"amount":1}`))
			req.Header.Set("Idempotency-Key", "k1")
			req.Header.Set("X-Request-Id", "r1")
			req.Header.Set("Idempotency-Token", "7")
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			res, err := client.Do(req)
			var body []byte
			if err == nil {
				body, err = io.ReadAll(res.Body)
				res.Body.Close()
			}
			tc.check(t, res, body, err)
			if err := u.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			h := rec.History()
			if len(h.Executions) != 1 {
				t.Fatalf("%d executions", len(h.Executions))
			}
			e := h.Executions[0]
			if e.Key != "k1" || e.RequestID != "r1" || e.Token != "7" || e.Status != 201 || e.Delivered != tc.delivered ||
				!strings.Contains(string(e.Body), `"request_id":"r1"`) || e.End.Before(e.Start) {
				t.Errorf("execution %+v, want delivered %v", e, tc.delivered)
			}
			if e.Fault == FaultCut && len(e.Body) != 1000 {
				t.Errorf("cut body of %d bytes, want 1000", len(e.Body))
			}
			if len(u.InFlight()) != 0 {
				t.Errorf("in flight after the end: %v", u.InFlight())
			}
		})
	}
	t.Run("unkeyed requests do not count", func(t *testing.T) {
		rec := NewRecorder(time.Second, "")
		u, err := StartUpstream(rec, Faults{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.Post(u.URL+"/charges", "application/json", strings.NewReader(`{}`))
		if err != nil || res.StatusCode != 400 {
			t.Fatalf("%v %v", err, res)
		}
		res.Body.Close()
		u.Close(context.Background())
		if n := len(rec.History().Executions); n != 0 {
			t.Errorf("%d executions", n)
		}
	})
}
