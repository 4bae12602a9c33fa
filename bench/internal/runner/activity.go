package runner

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// activity is what the whole machine did up to a moment: CPU time by kind
// (/proc/stat, in clock ticks) and the disks' writes and busy time
// (/proc/diskstats, whole disks only). The difference of two tells what
// else was going on while a contender was measured: another process's
// CPU, I/O wait, the hypervisor's steal, writeback.
type activity struct {
	at                         time.Time
	idle, iowait, steal, total float64
	sectorsWritten, busyMillis float64
}

func readActivity() activity {
	a := activity{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, s := range f[1:] {
			v, _ := strconv.ParseFloat(s, 64)
			if i >= 8 { // guest time is counted in user already
				break
			}
			a.total += v
			switch i {
			case 3:
				a.idle = v
			case 4:
				a.iowait = v
			case 7:
				a.steal = v
			}
		}
	}
	if b, err := os.ReadFile("/proc/diskstats"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 13 || !wholeDisk(f[2]) {
				continue
			}
			w, _ := strconv.ParseFloat(f[9], 64)
			t, _ := strconv.ParseFloat(f[12], 64)
			a.sectorsWritten += w
			a.busyMillis += t
		}
	}
	return a
}

// wholeDisk tells a disk (vda, sda, nvme0n1) from its partitions and from
// loop and ram devices, which would count writes twice or not at all.
func wholeDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "zram", "dm-"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	if _, err := os.Stat("/sys/block/" + name); err != nil {
		return false
	}
	return true
}

// since describes the machine's activity from a to now, for the log.
func (a activity) since() string {
	b := readActivity()
	total := b.total - a.total
	if total <= 0 {
		return "no figures"
	}
	pct := func(x float64) float64 { return 100 * x / total }
	wall := b.at.Sub(a.at)
	return fmt.Sprintf("CPU idle %.0f%%, iowait %.0f%%, steal %.0f%%; disk %.1f MB written, busy %.0f%% of %s",
		pct(b.idle-a.idle), pct(b.iowait-a.iowait), pct(b.steal-a.steal),
		(b.sectorsWritten-a.sectorsWritten)*512/1e6, 100*(b.busyMillis-a.busyMillis)/float64(wall.Milliseconds()+1), wall.Round(100*time.Millisecond))
}
