//go:build race

package main

// raceEnabled: the tests run under the race detector, so the gateway
// binary they start is built with it too.
const raceEnabled = true
