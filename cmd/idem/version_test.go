package main

import (
	"archive/zip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// TestLongVersionFromGoInstall: `go install github.com/idem-dev/idem/cmd/idem@vX`
// gives a binary whose `idem version` prints vX. The module is served from a
// local file proxy (a zip of this checkout, as a tag would publish it); the
// dependencies come from the module cache. 30 s on an idle machine (up to
// 2 min on a busy one): the idem packages compile and link once more under
// the module cache's paths. So it runs under IDEM_LONG=1 (make long).
func TestLongVersionFromGoInstall(t *testing.T) {
	t.Parallel()
	if os.Getenv("IDEM_LONG") == "" {
		t.Skip("builds idem with go install @version; IDEM_LONG=1 (make long) runs it")
	}
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Unavailable(t, "git is not installed")
	}
	// A fixed version: the module then lands in the same place each run
	// and the build cache makes later runs fast.
	const version = "v0.9.0-versiontest"
	const mod = "github.com/idem-dev/idem"
	proxy := t.TempDir()
	vdir := filepath.Join(proxy, mod, "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	ls := exec.Command("git", "ls-files")
	ls.Dir = "../.."
	files, err := ls.Output()
	if err != nil {
		t.Fatal(err)
	}
	zf, err := os.Create(filepath.Join(vdir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	names := strings.Split(strings.TrimSpace(string(files)), "\n")
	// A directory with a go.mod of its own (bench/, trigger/temporal/) is
	// another module: a tag's zip leaves it out, and go refuses a zip
	// that holds a go.mod below its root.
	var nested []string
	for _, f := range names {
		if strings.HasSuffix(f, "/go.mod") {
			nested = append(nested, strings.TrimSuffix(f, "go.mod"))
		}
	}
	for _, f := range names {
		if slices.ContainsFunc(nested, func(dir string) bool { return strings.HasPrefix(f, dir) }) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(mod + "@" + version + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zf.Close()
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		version + ".mod":  gomod,
		version + ".info": fmt.Appendf(nil, `{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339)),
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	mc := strings.TrimSpace(string(modcache))
	t.Cleanup(func() {
		// Only what this test put in the shared module cache.
		extracted := filepath.Join(mc, mod+"@"+version)
		filepath.Walk(extracted, func(p string, _ os.FileInfo, _ error) error { os.Chmod(p, 0o755); return nil })
		os.RemoveAll(extracted)
		dl := filepath.Join(mc, "cache", "download", mod, "@v")
		matches, _ := filepath.Glob(filepath.Join(dl, version+".*"))
		for _, m := range matches {
			os.Remove(m)
		}
		os.Remove(filepath.Join(dl, "list"))
		// The directories, when nothing else is in them.
		os.Remove(dl)
		os.Remove(filepath.Dir(dl))
		os.Remove(filepath.Dir(filepath.Dir(dl)))
		os.Remove(filepath.Dir(extracted))
	})
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", mod+"/cmd/idem@"+version)
	cmd.Dir = t.TempDir() // outside this module
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOPROXY=file://"+proxy+",off", "GOSUMDB=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "idem"), "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "idem "+version+" go1.") {
		t.Errorf("idem --version = %q, %v; want idem %s ...", out, err, version)
	}
}
