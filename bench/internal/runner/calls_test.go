package runner

import "testing"

func TestParseBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/idem-dev/idem/bench/internal/inproc
BenchmarkCall/idem/first-2         	   20000	     93051 ns/op	     21065 cpu-ns/op	    9651 B/op	      46 allocs/op
PASS
`
	f, err := parseBench([]byte(out), "Call/")
	if err != nil {
		t.Fatal(err)
	}
	if f.NsPerOp != 93051 || f.CPUNsPerOp != 21065 || f.BytesOp != 9651 || f.AllocsOp != 46 {
		t.Errorf("%+v", f)
	}
	if _, err := parseBench([]byte("PASS\n"), "Call/"); err == nil {
		t.Error("no result parsed")
	}
	if _, err := parseBench([]byte(out), "Anchor/"); err == nil {
		t.Error("a result of another benchmark parsed")
	}
	anchor := `pkg: github.com/idem-dev/idem/store/file
BenchmarkAnchor/c64/log1-2         	  153420	     12904 ns/op	     77494 pairs/s	        31.50 pairs/sync	         7.400 cpu-µs/op	     934 B/op	      11 allocs/op
PASS
`
	f, err = parseBench([]byte(anchor), "Anchor/")
	if err != nil {
		t.Fatal(err)
	}
	if f.PerSec != 77494 || f.PerSync != 31.5 || f.CPUNsPerOp != 7400 || f.AllocsOp != 11 {
		t.Errorf("%+v", f)
	}
}
