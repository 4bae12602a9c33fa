//go:build unix

package testkit

import (
	"syscall"
	"time"
)

// ProcessCPU returns the user and system CPU time the process has used
// (0 where the platform does not say): unlike wall time, it hardly
// depends on what else the machine runs, so benchmarks report it beside
// ns/op.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
