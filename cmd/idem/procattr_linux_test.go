package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the child if the test process dies
// (a panic or a -timeout), so that no gateway outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
