//go:build !unix

package testkit

import "time"

func ProcessCPU() time.Duration { return 0 }
