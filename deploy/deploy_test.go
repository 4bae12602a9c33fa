package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/metrics"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Unavailable(t, "%s is not installed (run scripts/test-deps.sh)", name)
	}
	return p
}

var built struct {
	once     sync.Once
	bin, err string
}

// buildIdem builds cmd/idem the way the Containerfile does, once per run.
func buildIdem(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "idem-deploy-test-")
		if err != nil {
			built.err = err.Error()
			return
		}
		built.bin, built.err = containerBuild(filepath.Join(dir, "idem"))
	})
	if built.err != "" {
		t.Fatal(built.err)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	testkit.VerifyTestMainAfter(m, func() {
		if built.bin != "" {
			os.RemoveAll(filepath.Dir(built.bin))
		}
	})
}

// containerBuild runs the Containerfile's build line with bin as output.
func containerBuild(bin string) (string, string) {
	cf, err := os.ReadFile("Containerfile")
	if err != nil {
		return "", err.Error()
	}
	// The Containerfile's build line, run here as it is written there.
	m := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 GOOS=linux go build .* -o )/out/idem( \./cmd/idem)$`).FindSubmatch(cf)
	if m == nil {
		return "", "the Containerfile has no `RUN CGO_ENABLED=0 GOOS=linux go build ... -o /out/idem ./cmd/idem` line"
	}
	cmd := exec.Command("sh", "-c", string(m[1])+bin+string(m[2]))
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("%s: %v\n%s", cmd.Args, err, out)
	}
	return bin, ""
}

// TestContainerBinaryStatic: no container engine runs on the machines
// idem is tested on (the docker CLI is there, its daemon is not), so the
// image itself is not built here. What it would contain is: the binary
// from the Containerfile's build line must run on distroless "static",
// which has no dynamic loader and no libc.
func TestContainerBinaryStatic(t *testing.T) {
	t.Parallel()
	bin := buildIdem(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader (PT_INTERP): it would not start on distroless/static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("shared libraries %v (%v)", libs, err)
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil || !strings.Contains(string(out), "CGO_ENABLED=0") || !strings.Contains(string(out), "-trimpath=true") {
		t.Errorf("build settings: %v\n%s", err, out)
	}
	// It runs, and says what it is.
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.HasPrefix(string(out), "idem ") {
		t.Errorf("idem version: %v %s", err, out)
	}
	cf, _ := os.ReadFile("Containerfile")
	for _, want := range []string{"FROM docker.io/library/golang:1.26", "AS build", "FROM gcr.io/distroless/static-debian12:nonroot",
		"USER 65532:65532", `ENTRYPOINT ["/usr/local/bin/idem"]`} {
		if !bytes.Contains(cf, []byte(want)) {
			t.Errorf("Containerfile lacks %q", want)
		}
	}
	if gomod, _ := os.ReadFile("../go.mod"); !bytes.Contains(gomod, []byte("\ngo 1.26")) {
		t.Error("go.mod's Go version no longer matches the Containerfile's golang:1.26 image")
	}
}

// TestSystemdUnit: systemd-analyze verify accepts the unit. The unit names
// /usr/local/bin/idem, which is not installed here: verify the unit as it
// is (only that complaint allowed), then a copy pointing at a built binary
// (no complaint at all).
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	sa := tool(t, "systemd-analyze")
	verify := func(path string) (string, error) {
		cmd := exec.Command(sa, "verify", path)
		cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, _ := verify("systemd/idem.service")
	for _, line := range strings.Split(out, "\n") {
		if line != "" && line != "idem.service: Command /usr/local/bin/idem is not executable: No such file or directory" {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	unit, err := os.ReadFile("systemd/idem.service")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildIdem(t)
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "idem.service")
	if err := os.WriteFile(copyPath, bytes.Replace(unit, []byte("ExecStart=/usr/local/bin/idem "), []byte("ExecStart="+bin+" "), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(copyPath); err != nil || out != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Its configuration is valid, and names no store: the default then
	// follows the unit's StateDirectory.
	c, err := config.Load("systemd/idem.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "" || !bytes.Contains(unit, []byte("StateDirectory=idem")) {
		t.Errorf("store %q; the unit must set StateDirectory", c.Store)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("systemd/idem.yaml: %v", err)
	}
}

// TestPrometheusRules: the rules load, and their unit tests pass.
func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// exportedMetrics returns the series names idem's registry exports, with
// every labelled metric touched once.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	r := httptest.NewRequest("POST", "/", nil)
	for _, e := range []idemhttp.Event{
		{Route: "/", Outcome: idemhttp.OutcomeExecuted, Status: 201},
		{Route: "/", Outcome: idemhttp.OutcomeReplayed, Status: 201},
		{Route: "/", Outcome: idemhttp.OutcomeRejected, Kind: idemhttp.KindInProgress, Status: 409},
		{Route: "/", Outcome: idemhttp.OutcomePassThrough, Status: 200},
		{Route: "/", Outcome: idemhttp.OutcomeUnprotected, Status: 201},
	} {
		m.Observe(r, e)
	}
	m.UpstreamError("timeout")
	m.KeysInProgress(func() int { return 3 })
	s := m.WrapStore(memory.New())
	defer s.Close()
	_, _ = s.Get(context.Background(), "", store.HashKey("", "k"))
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	names := map[string]bool{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "idem_") {
			names[regexp.MustCompile(`^[a-z_]+`).FindString(line)] = true
		}
	}
	if len(names) < 8 {
		t.Fatalf("exported: %v", names)
	}
	return names
}

var metricName = regexp.MustCompile(`\bidem_[a-z_]+`)

// TestMetricNames: the alert rules and the dashboard ask only for series
// that idem exports (a renamed metric would silently never alert).
func TestMetricNames(t *testing.T) {
	t.Parallel()
	have := exportedMetrics(t)
	var exprs []string
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err = os.ReadFile("grafana/idem-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	if len(exprs) < 15 {
		t.Fatalf("only %d expressions", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			used[n] = true
			if !have[n] {
				t.Errorf("%s is not exported by idem (in %q)", n, e)
			}
		}
	}
	// Every counter of idem's is on the dashboard or in a rule.
	for n := range have {
		base := strings.TrimSuffix(strings.TrimSuffix(n, "_sum"), "_bucket")
		if !used[n] && !used[base] && !used[base+"_count"] && !used[base+"_bucket"] && !strings.HasSuffix(n, "_sum") {
			t.Errorf("%s is exported but neither graphed nor alerted on", n)
		}
	}
}

// TestKubernetesExamples: the manifests parse, their idem configuration
// is valid, the probes point at the admin listener's liveness and
// readiness, and the gateway runs as the image's non-root user.
func TestKubernetesExamples(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"kubernetes/sidecar.yaml", "kubernetes/gateway.yaml"} {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dec := yaml.NewDecoder(bytes.NewReader(b))
			var kinds []string
			var configs []string
			var idem, api, pod map[string]any
			for {
				var doc map[string]any
				if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				kind, _ := doc["kind"].(string)
				kinds = append(kinds, kind)
				if kind == "ConfigMap" {
					data := doc["data"].(map[string]any)
					configs = append(configs, data["idem.yaml"].(string))
				}
				if kind == "Deployment" {
					pod = dig(doc, "spec", "template", "spec").(map[string]any)
					for _, c := range pod["containers"].([]any) {
						switch c.(map[string]any)["name"] {
						case "idem":
							idem = c.(map[string]any)
						case "api":
							api = c.(map[string]any)
						}
					}
				}
			}
			for _, k := range []string{"ConfigMap", "Deployment", "Service"} {
				if !slices.Contains(kinds, k) {
					t.Errorf("no %s in %v", k, kinds)
				}
			}
			if len(configs) != 1 {
				t.Fatalf("%d idem configs", len(configs))
			}
			c, err := config.Parse([]byte(configs[0]))
			if err != nil {
				t.Fatal(err)
			}
			c.Upstream = strings.Replace(c.Upstream, ".svc.cluster.local", "", 1)
			if err := c.Validate(); err != nil {
				t.Fatalf("idem.yaml: %v", err)
			}
			if c.DrainDelayDuration() <= 0 || !strings.HasPrefix(c.AdminListen, "0.0.0.0:") {
				t.Errorf("drain_delay %v, admin_listen %q: probes need the pod IP and a drain delay", c.DrainDelayDuration(), c.AdminListen)
			}
			if idem == nil {
				t.Fatal("no idem container")
			}
			readiness, _ := dig(idem, "readinessProbe", "httpGet", "path").(string)
			if !strings.HasPrefix(readiness, "/readyz") {
				t.Errorf("readiness probe %q", readiness)
			}
			switch filepath.Base(f) {
			case "sidecar.yaml":
				checkSidecarStop(t, c, pod, api)
			case "gateway.yaml":
				checkGatewayReadiness(t, configs[0], readiness, c)
			}
			if p := dig(idem, "livenessProbe", "httpGet", "path"); p != "/healthz" {
				t.Errorf("liveness probe %v", p)
			}
			if u := dig(idem, "securityContext", "runAsUser"); u != 65532 {
				t.Errorf("runAsUser %v", u)
			}
			// An admin listener on the pod IP needs a token, and a shared
			// store a secret: both from a Secret the operator makes, never
			// a value in the manifest that would be applied as is.
			if slices.Contains(kinds, "Secret") || strings.Contains(strings.ToLower(string(b)), "change-me") {
				t.Error("the manifest ships a Secret or a placeholder value: it would be applied as is")
			}
			fromSecret := map[string]bool{}
			for _, e := range asList(idem["env"]) {
				e := e.(map[string]any)
				if ref, ok := dig(e, "valueFrom", "secretKeyRef", "key").(string); ok && ref == e["name"] {
					fromSecret[ref] = true
				} else if _, literal := e["value"]; literal && strings.HasPrefix(fmt.Sprint(e["name"]), "IDEM_") {
					t.Errorf("env %v has a literal value", e["name"])
				}
			}
			for _, v := range []string{"IDEM_ADMIN_TOKEN", "IDEM_SECRET", "IDEM_STORE"} {
				if !fromSecret[v] {
					t.Errorf("%s is not taken from a Secret (env valueFrom.secretKeyRef)", v)
				}
			}
		})
	}
}

// checkSidecarStop: on pod deletion every container gets SIGTERM at once,
// after its own preStop hook. The API container must outlive idem's whole
// stop (drain_delay, then shutdown_timeout for in-flight calls, then 5 s
// for detached ones, cmd/idem's shutdown), or idem's last calls get 502
// and the keys cut mid-call are left as outcome unknown; the grace period
// must cover the API's sleep and its own stop after it.
func checkSidecarStop(t *testing.T, c *config.Config, pod, api map[string]any) {
	t.Helper()
	if api == nil {
		t.Fatal("no api container")
	}
	var sleep time.Duration
	if n, ok := dig(api, "lifecycle", "preStop", "sleep", "seconds").(int); ok {
		sleep = time.Duration(n) * time.Second
	} else if cmd, ok := dig(api, "lifecycle", "preStop", "exec", "command").([]any); ok && len(cmd) == 2 && cmd[0] == "sleep" {
		n, _ := strconv.Atoi(fmt.Sprint(cmd[1]))
		sleep = time.Duration(n) * time.Second
	}
	idemStop := c.DrainDelayDuration() + time.Duration(c.ShutdownTimeout) + 5*time.Second
	if sleep <= idemStop {
		t.Errorf("the api container's preStop sleeps %v; idem may take %v to stop (drain_delay %v + shutdown_timeout %v + 5s): the API would stop first",
			sleep, idemStop, c.DrainDelayDuration(), time.Duration(c.ShutdownTimeout))
	}
	grace, _ := pod["terminationGracePeriodSeconds"].(int)
	if g := time.Duration(grace) * time.Second; g < sleep+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v: want the api's preStop (%v) and 10s at least for its own stop", g, sleep)
	}
}

// checkGatewayReadiness: a gateway Deployment in front of a shared
// upstream is ready on its own store, with the upstream reported but not
// a condition: else an upstream outage takes every replica out of the
// Service at once. The probe is tried on the built binary with the
// manifest's configuration and its upstream down.
func checkGatewayReadiness(t *testing.T, yamlConfig, probe string, c *config.Config) {
	t.Helper()
	if c.UpstreamReadyCheck() == "off" {
		t.Error("upstream_ready: off: the upstream's health is then reported nowhere")
	}
	bin := buildIdem(t)
	f := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(f, []byte(yamlConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := "http://" + down.Addr().String()
	down.Close() // nothing listens there any more
	cmd := exec.Command(bin, "serve", "--config", f, "--upstream", upstream, "--store", "memory:",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--drain-delay", "0s", "--log-format", "json")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	testkit.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	admin := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m struct {
				AdminAddr string `json:"admin_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.AdminAddr != "" {
				admin <- m.AdminAddr
			}
		}
		close(admin)
	}()
	var addr string
	select {
	case addr = <-admin:
	case <-time.After(60 * time.Second):
	}
	if addr == "" {
		t.Fatal("idem serve did not start")
	}
	get := func(path string) (int, string) {
		res, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(probe); code != 200 || !strings.Contains(body, `"store": "ok"`) || !strings.Contains(body, `"upstream": "`) || strings.Contains(body, `"upstream": "ok"`) {
		t.Errorf("readiness probe %s with the upstream down = %d %s; want 200, the store ok and the upstream's failure reported", probe, code, body)
	}
	// The plain /readyz would have taken the gateway out: the probe's
	// choice is what keeps it in.
	if code, _ := get("/readyz"); code != 503 {
		t.Errorf("/readyz with the upstream down = %d, want 503", code)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}
