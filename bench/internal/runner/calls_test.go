package runner

import "testing"

func TestParseCall(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/idem-dev/idem/bench/internal/inproc
BenchmarkCall/idem/first-2         	   20000	     93051 ns/op	     21065 cpu-ns/op	    9651 B/op	      46 allocs/op
PASS
`
	f, err := parseCall([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if f.NsPerOp != 93051 || f.CPUNsPerOp != 21065 || f.BytesOp != 9651 || f.AllocsOp != 46 {
		t.Errorf("%+v", f)
	}
	if _, err := parseCall([]byte("PASS\n")); err == nil {
		t.Error("no result parsed")
	}
}
