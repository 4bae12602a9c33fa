package runner

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/idem-dev/idem/bench/internal/results"
)

// Machine describes this machine and the versions of what runs on it.
func Machine() results.Machine {
	m := results.Machine{Cores: runtime.NumCPU(), Versions: []string{runtime.Version()}}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				m.MemoryGB = kb / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	for _, c := range [][]string{
		{"node", "--version"},
		{"psql", "--version"},
		{"redis-server", "--version"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).Output(); err == nil {
			v := strings.TrimSpace(string(out))
			if c[0] == "node" {
				v = "node " + v
			}
			if c[0] == "redis-server" {
				// "Redis server v=7.0.15 sha=... malloc=..."
				for _, f := range strings.Fields(v) {
					if s, ok := strings.CutPrefix(f, "v="); ok {
						v = "redis " + s
					}
				}
			}
			m.Versions = append(m.Versions, v)
		}
	}
	return m
}
