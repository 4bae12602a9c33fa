package s3store_test

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the server when the test binary
// dies, even by a panic or a timeout, which skip TestMain's cleanup.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
