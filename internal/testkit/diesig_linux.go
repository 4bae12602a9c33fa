package testkit

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes the kernel kill cmd when the test process dies, even
// by a panic or a timeout, which skip t.Cleanup and TestMain's own cleanup.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
