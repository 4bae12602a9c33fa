//go:build !linux

package storetest

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no such signal;
// t.Cleanup kills the children.
func setParentDeathSignal(*exec.Cmd) {}
