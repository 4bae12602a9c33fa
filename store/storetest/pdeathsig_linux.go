package storetest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill cmd when the test process
// dies, even by a panic or a timeout, which skip t.Cleanup.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
