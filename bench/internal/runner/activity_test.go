package runner

import (
	"strings"
	"testing"
)

func TestActivity(t *testing.T) {
	a := readActivity()
	if a.total <= 0 {
		t.Fatalf("no CPU time read from /proc/stat: %+v", a)
	}
	// Burn a little CPU so that some ticks pass.
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i
	}
	_ = x
	s := a.since()
	for _, want := range []string{"CPU idle ", "iowait ", "steal ", "MB written", "busy "} {
		if !strings.Contains(s, want) {
			t.Errorf("since() = %q, lacks %q", s, want)
		}
	}
	if wholeDisk("loop0") || wholeDisk("vda1-not-a-disk") {
		t.Error("wholeDisk counts a loop device or a name that is not in /sys/block")
	}
}
