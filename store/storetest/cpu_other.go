//go:build !unix

package storetest

import "time"

func processCPU() time.Duration { return 0 }
