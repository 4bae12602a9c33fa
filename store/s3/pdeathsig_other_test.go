//go:build !linux

package s3store_test

import "os/exec"

// setParentDeathSignal: only Linux can tie a child's life to its parent's;
// elsewhere a crashed test binary may leave the server running.
func setParentDeathSignal(*exec.Cmd) {}
