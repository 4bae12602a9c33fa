package main

// The end-to-end harness: the idem binary, built once, run as real
// processes over real TCP. Every process a test starts is killed by the
// test's cleanup, and by the kernel if the test binary itself dies.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/gateway/demoapi"
	"github.com/idem-dev/idem/internal/testkit"
)

// idemBin is the binary built by TestMain.
var idemBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	idemBin = filepath.Join(dir, "idem")
	args := []string{"build", "-o", idemBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building idem:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	testkit.VerifyTestMainAfter(m, func() { os.RemoveAll(dir) })
}

// childEnv is the environment of the processes the tests start: none of
// the operator's IDEM_* and OTEL_* settings (a test that traces sets its
// own), and no 1 s sleep at exit under the race detector.
func childEnv() []string {
	env := []string{"GORACE=atexit_sleep_ms=0"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") && !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	return env
}

// proc is a child process whose output is kept for failure reports.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set when done is closed

	mu    sync.Mutex
	lines []string
}

// start runs idem with args. onLine sees every line of stdout and stderr.
func start(t *testing.T, name string, onLine func(string), args ...string) *proc {
	t.Helper()
	return startEnv(t, name, nil, onLine, args...)
}

// startEnv is start with env added to the child's environment.
func startEnv(t *testing.T, name string, env []string, onLine func(string), args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan struct{})}
	p.cmd = exec.Command(idemBin, args...)
	p.cmd.Env = append(childEnv(), env...)
	testkit.DieWithParent(p.cmd)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				p.mu.Lock()
				p.lines = append(p.lines, line)
				p.mu.Unlock()
				if onLine != nil {
					onLine(line)
				}
			}
		}()
	}
	go func() {
		readers.Wait() // the pipes must be drained before Wait
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- output of %s (pid %d):\n%s", p.name, p.cmd.Process.Pid, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// kill ends the process at once, if it still runs, and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends sig and waits up to timeout for the process to exit.
func (p *proc) stop(sig os.Signal, timeout time.Duration) error {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not exit within %v of %v", p.name, timeout, sig)
	}
}

// api is the demo payments API, run as its own process.
type api struct {
	*proc
	URL string
}

func startAPI(t *testing.T) *api {
	t.Helper()
	addr := make(chan string, 1)
	p := start(t, "demo-api", func(line string) {
		if u, ok := strings.CutPrefix(line, "demo API listening on "); ok {
			addr <- u
		}
	}, "demo-api", "--listen", "127.0.0.1:0")
	select {
	case u := <-addr:
		return &api{proc: p, URL: u}
	case <-p.done:
		t.Fatalf("demo-api exited: %v\n%s", p.err, p.output())
	case <-time.After(10 * time.Second):
		t.Fatalf("demo-api did not start\n%s", p.output())
	}
	return nil
}

// stats returns the API's own count of executions.
func (a *api) stats(t *testing.T) demoapi.Stats {
	t.Helper()
	res, err := http.Get(a.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s demoapi.Stats
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// gw is an `idem serve` process.
type gw struct {
	*proc
	URL, Admin string
	dir        string // the file store's directory
}

// startGateway runs `idem serve` in front of upstream on the file store in
// dir, with yaml as its config file when not empty, and waits until its
// /readyz answers 200.
func startGateway(t *testing.T, upstream, dir, yaml string, extra ...string) *gw {
	t.Helper()
	return startGatewayEnv(t, nil, upstream, dir, yaml, extra...)
}

// startGatewayEnv is startGateway with env added to the gateway's
// environment. Unless yaml mentions tenant or anonymous (a comment "#
// tenant: the default" keeps the default), keyed requests without
// credentials share the anonymous scope (anonymous: shared): most tests
// are not about callers.
func startGatewayEnv(t *testing.T, env []string, upstream, dir, yaml string, extra ...string) *gw {
	t.Helper()
	if !strings.Contains(yaml, "tenant") && !strings.Contains(yaml, "anonymous") {
		if yaml != "" && !strings.HasSuffix(yaml, "\n") {
			yaml += "\n"
		}
		yaml += "anonymous: shared\n"
	}
	args := []string{"serve", "--upstream", upstream, "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--log-format", "json"}
	if dir != "" {
		dsn := "file:" + dir
		if strings.HasPrefix(dir, "pebble:") {
			dsn = dir
		}
		args = append(args, "--store", dsn)
	}
	if yaml != "" {
		f := filepath.Join(t.TempDir(), "idem.yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", f)
	}
	args = append(args, extra...)
	type addrs struct{ addr, admin string }
	ready := make(chan addrs, 1)
	p := startEnv(t, "idem serve", env, func(line string) {
		var m struct {
			Msg       string `json:"msg"`
			Addr      string `json:"addr"`
			AdminAddr string `json:"admin_addr"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "idem gateway listening" {
			ready <- addrs{m.Addr, m.AdminAddr}
		}
	}, args...)
	var a addrs
	select {
	case a = <-ready:
	case <-p.done:
		t.Fatalf("idem serve exited: %v\n%s", p.err, p.output())
	case <-time.After(20 * time.Second):
		t.Fatalf("idem serve did not start\n%s", p.output())
	}
	// A listener on every interface is reached on loopback.
	local := func(addr string) string { return strings.Replace(addr, "0.0.0.0:", "127.0.0.1:", 1) }
	g := &gw{proc: p, URL: "http://" + local(a.addr), Admin: "http://" + local(a.admin), dir: dir}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get(g.Admin + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			// A store opened on a full disk serves replays, and says so.
			if res.StatusCode == 200 || res.StatusCode == 503 && strings.Contains(string(body), "not writable") {
				return g
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready: %v\n%s", err, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// response is what a test keeps of an HTTP answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) problem(t *testing.T) map[string]any {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("status %d Content-Type %q, want application/problem+json; body %s", r.Status, ct, r.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	if p["status"] != float64(r.Status) || p["type"] == nil || p["title"] == nil {
		t.Errorf("problem %v lacks type/title/status %d", p, r.Status)
	}
	return p
}

func (r response) charge(t *testing.T) demoapi.Charge {
	t.Helper()
	var c demoapi.Charge
	if err := json.Unmarshal(r.Body, &c); err != nil {
		t.Fatalf("charge body %q (status %d): %v", r.Body, r.Status, err)
	}
	return c
}

// client is shared by the tests; it keeps enough connections for the
// concurrency test.
var client = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     5 * time.Second,
	},
}

// post sends a POST with body and headers given as name, value pairs; a
// name may repeat to send two fields.
func post(t testing.TB, url, body string, hdr ...string) response {
	t.Helper()
	r, err := tryPost(context.Background(), url, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tryPost(ctx context.Context, url, body string, hdr ...string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header[http.CanonicalHeaderKey(hdr[i])] = append(req.Header[http.CanonicalHeaderKey(hdr[i])], hdr[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}, nil
}

// runIdem runs an idem command to completion and returns its stdout, stderr
// and error.
func runIdem(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBin, args...)
	cmd.Env = childEnv()
	testkit.DieWithParent(cmd)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
