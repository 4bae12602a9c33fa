package testkit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
)

// childEnv makes the test binary a child of TestStartChild.
const childEnv = "IDEM_TESTKIT_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// The child: ready, then echo one line from the parent, then hang
		// until killed.
		fmt.Println("ready")
		in := bufio.NewReader(os.Stdin)
		line, _ := in.ReadString('\n')
		fmt.Print("echo " + line)
		if line == "payment-42\n" {
			fmt.Println("ready")
			line, _ = in.ReadString('\n')
			fmt.Print("released " + line)
		}
		select {}
	}
	testkit.VerifyTestMain(m)
}

// TestStartChild: the child runs TestMain's child part, talks over stdin
// and stdout, and is gone when the test ends.
func TestStartChild(t *testing.T) {
	t.Parallel()
	var c *testkit.Child
	t.Run("talk", func(t *testing.T) {
		c = testkit.StartChild(t, childEnv+"=1")
		if !c.WaitLine("ready", 30*time.Second) {
			t.Fatal("no ready line")
		}
		fmt.Fprintln(c.Stdin, "payment-42")
		if !c.WaitLine("echo payment-42", 30*time.Second) {
			t.Fatal("no echo")
		}
		testkit.ReleaseTogether(t, c)
		if !c.WaitLine("released go", 30*time.Second) {
			t.Fatal("not released")
		}
		if c.WaitLine("never", 50*time.Millisecond) {
			t.Fatal("a line that was never written")
		}
	})
	// The subtest's cleanup killed and reaped the child.
	if c.Cmd.ProcessState == nil || c.Cmd.ProcessState.Success() {
		t.Fatalf("child not killed: %v", c.Cmd.ProcessState)
	}
	if c.WaitLine("ready", time.Second) {
		t.Fatal("lines after the child died")
	}
}

func TestClock(t *testing.T) {
	t.Parallel()
	c := testkit.NewClock()
	if !c.Now().Equal(testkit.Epoch) {
		t.Fatalf("new clock reads %v", c.Now())
	}
	c.Add(90 * time.Second)
	if got := c.Now().Sub(testkit.Epoch); got != 90*time.Second {
		t.Fatalf("after Add: %v", got)
	}
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c.Set(at)
	if !c.Now().Equal(at) {
		t.Fatalf("after Set: %v", c.Now())
	}
}

func TestFanOutRunsEachOnceTogether(t *testing.T) {
	t.Parallel()
	const n = 64
	var seen [n]atomic.Int32
	var inside, peak atomic.Int32
	testkit.FanOut(n, func(i int) {
		seen[i].Add(1)
		cur := inside.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		inside.Add(-1)
	})
	for i := range seen {
		if got := seen[i].Load(); got != 1 {
			t.Fatalf("fn(%d) ran %d times", i, got)
		}
	}
	if peak.Load() < 2 {
		t.Fatalf("racers never overlapped (peak %d)", peak.Load())
	}
}

// TestSameKey: n copies reach the server together, each with the key in
// the header asked for and the whole body, and each gets its own answer.
func TestSameKey(t *testing.T) {
	t.Parallel()
	const n = 16
	var inside, peak atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := inside.Add(1)
		defer inside.Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Seen-Key", r.Header.Get("X-Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), b)
	}))
	t.Cleanup(srv.Close)

	got := testkit.SameKey(context.Background(), nil, n, testkit.Request{
		URL: srv.URL + "/charges", Key: "double-tap", KeyHeader: "X-Idempotency-Key",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: `{"amount":1000}`,
	})
	if len(got) != n {
		t.Fatalf("%d responses, want %d", len(got), n)
	}
	for i, r := range got {
		if r.Err != nil || r.Status != http.StatusCreated || r.Header.Get("Seen-Key") != "double-tap" ||
			string(r.Body) != `POST /charges application/json {"amount":1000}` {
			t.Fatalf("copy %d: %d %q %q %v", i, r.Status, r.Header.Get("Seen-Key"), r.Body, r.Err)
		}
	}
	if peak.Load() < 2 {
		t.Fatalf("the copies never overlapped at the server (peak %d)", peak.Load())
	}

	// Without a key, no key header; an unreachable URL is an error per copy.
	got = testkit.SameKey(context.Background(), nil, 2, testkit.Request{Method: "GET", URL: srv.URL + "/x"})
	for _, r := range got {
		if r.Err != nil || r.Header.Get("Seen-Key") != "" || string(r.Body) != "GET /x  " {
			t.Fatalf("no key: %d %q %v", r.Status, r.Body, r.Err)
		}
	}
	got = testkit.SameKey(context.Background(), nil, 2, testkit.Request{URL: "http://127.0.0.1:1/"})
	for _, r := range got {
		if r.Err == nil {
			t.Fatalf("unreachable URL answered %d", r.Status)
		}
	}
}

// TestSlowBody: a server that answers 408 and closes is seen to close; one
// that sends more on the connection is not.
func TestSlowBody(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		head := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				head <- err.Error()
				return
			}
			defer c.Close()
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				head <- err.Error()
				return
			}
			head <- req.Method + " " + req.URL.Path + " " + req.Header.Get("Idempotency-Key")
			io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
			if keep {
				io.WriteString(c, "x") // the connection is still in use
			}
		}()
		status, closed, err := testkit.SlowBody(ln.Addr().String(), "/charges", "slow-1", `{"a":`)
		ln.Close()
		if err != nil || status != http.StatusRequestTimeout || closed != !keep {
			t.Fatalf("keep %v: %d closed %v %v", keep, status, closed, err)
		}
		if h := <-head; h != "POST /charges slow-1" {
			t.Fatalf("server saw %q", h)
		}
	}
}
