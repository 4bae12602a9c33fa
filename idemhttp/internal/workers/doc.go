// Package workers runs functions on goroutines kept between calls.
//
// A new goroutine starts with a small stack and, when its call goes deep,
// the runtime grows it by copying it to a larger one, more than once. A
// call that the middleware runs on a goroutine of its own (a route with an
// answer deadline: every gateway route) goes through the engine, the store
// and the reverse proxy: growing the stacks of those goroutines showed in
// the gateway's CPU profile under the benchmark harness's load
// (docs/bench/MIDDLEWARE.md). A worker kept between calls keeps the stack
// it grew.
//
// A worker with nothing to do exits after Idle, so a program (or a test
// checking for leaked goroutines) that stops calling is left with none.
package workers
