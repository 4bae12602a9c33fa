package testkit

import "sync"

// FanOut runs fn(0) to fn(n-1) on n goroutines released at the same
// instant, and returns when all have returned. Racers that start one by one
// as they are created rarely overlap; a shared start makes them collide on
// one key the way retries from many clients do.
func FanOut(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}
