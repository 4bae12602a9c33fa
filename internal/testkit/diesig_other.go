//go:build !linux

package testkit

import "os/exec"

// DieWithParent does nothing where the kernel has no parent-death signal;
// t.Cleanup kills the children.
func DieWithParent(*exec.Cmd) {}
