package localtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/hold"
)

// slowKey is the key heldChild reserves and never completes.
const slowKey = "slow-call"

// heldChild opens the store on dir with OneSync, reserves slowKey as a
// first call whose reservation may be taken over (the gateway's case),
// and waits well past the bound a reservation is kept in memory for
// (hold.Default), as a slow upstream call would, before it says so: its
// parent then kills it.
func heldChild(h Harness, dir string) int {
	s, err := h.OpenOneSync(dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if res, err := s.Reserve(context.Background(), ReserveReq(slowKey, time.Hour)); err != nil || !res.Acquired {
		fmt.Fprintln(os.Stderr, "reserve:", res, err)
		return 1
	}
	// Twenty bounds: the sweep runs every half bound, on a machine whose
	// tests share two cores.
	time.Sleep(20 * hold.Default)
	fmt.Println("ready")
	time.Sleep(time.Hour)
	return 0
}

// HeldKill: a process killed (SIGKILL) while a first call's work is slow
// leaves its key in progress. With OneSync the store keeps such a
// reservation in memory only for a bound (hold.Default), then writes it
// without a sync; after the kill, the reopened store holds the key in
// progress (an outcome unknown to an operator, a retry with another body
// refused) rather than no trace of it.
func HeldKill(t *testing.T, h Harness) {
	dir := t.TempDir()
	cmd := ChildCommand("held", dir, 0)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if kerr := cmd.Process.Kill(); kerr != nil {
		t.Fatal(kerr)
	}
	_ = cmd.Wait()
	if line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	s := h.OpenT(t, dir)
	r, err := s.Get(context.Background(), "s", store.HashKey("s", slowKey))
	if err != nil || r.State != store.InProgress {
		t.Fatalf("after the kill, the key of a call held past the bound: %+v, %v; want in progress", r, err)
	}
}
