package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Config is one run of the suite against a cluster.
type Config struct {
	Cluster  Cluster
	Upstream *Upstream
	Recorder *Recorder

	// Duration is how long new keys start and the nemesis acts; the run
	// then waits for the keys in flight, each up to KeyDeadline.
	Duration time.Duration
	// Keys is how many keys are in flight at once; each has a patient
	// and an impatient client.
	Keys int
	// KeyDeadline bounds how long the clients of one key keep retrying.
	KeyDeadline time.Duration
	// Patient and Impatient are the two clients' timeouts per attempt:
	// the patient one outwaits a pause, the impatient one retries on
	// another gateway meanwhile.
	Patient, Impatient time.Duration
	// KeyPrefix makes the run's keys its own.
	KeyPrefix string

	// Nemeses are the faults done to the gateways in turn, EventKill and
	// EventPause, one every Every (with jitter); none when empty.
	Nemeses []string
	Every   time.Duration
	// Down is how long a killed gateway stays down before its restart;
	// PauseFor how long a paused one stays stopped (past its lease).
	Down     time.Duration
	PauseFor [2]time.Duration

	// StallAfter is how late a gateway's health answer must be for the
	// watchdog to record a stall (EventStall): a gateway that no nemesis
	// paused but the machine starved. Zero means half the lease.
	StallAfter time.Duration

	// Logf, if set, is told what the nemesis does.
	Logf func(format string, args ...any)
}

// Run sends traffic through the cluster while the nemesis hurts it, and
// returns once every key's clients are done. What happened is in
// cfg.Recorder; an error means the cluster could not be driven (a gateway
// would not restart), not that a promise was broken: Check says that.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.StallAfter == 0 {
		cfg.StallAfter = cfg.Recorder.History().Lease / 2
	}
	cl := newClients(cfg.Cluster, cfg.Recorder)
	stopAt := time.Now().Add(cfg.Duration)

	nemesisErr := make(chan error, 1)
	nctx, stopNemesis := context.WithDeadline(ctx, stopAt)
	defer stopNemesis()
	paused := &pauses{}
	go func() { nemesisErr <- nemesis(nctx, cfg, cl, paused) }()
	wctx, stopWatchdog := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { watchdog(wctx, cfg, paused); close(watched) }()
	defer func() { stopWatchdog(); <-watched }()

	var wg sync.WaitGroup
	slots := make(chan struct{}, cfg.Keys)
	for n := 0; ctx.Err() == nil && time.Now().Before(stopAt); n++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		if !time.Now().Before(stopAt) {
			break
		}
		key := fmt.Sprintf("%s%d", cfg.KeyPrefix, n)
		deadline := time.Now().Add(cfg.KeyDeadline)
		var kw sync.WaitGroup
		for _, c := range []struct {
			name    string
			timeout time.Duration
		}{{"patient", cfg.Patient}, {"impatient", cfg.Impatient}} {
			kw.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer kw.Done()
				// The duplicate comes a moment after the first tap.
				time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
				cl.work(ctx, key, c.name, 100+n, c.timeout, deadline)
			}()
		}
		go func() { kw.Wait(); <-slots }()
	}
	err := <-nemesisErr
	wg.Wait()
	return err
}

// nemesis kills or pauses a gateway, in turn, every cfg.Every, preferring
// one that holds a key whose call is running upstream. A killed gateway is
// restarted after cfg.Down, a paused one continued after cfg.PauseFor. It
// returns when ctx is done, with every gateway up and running.
func nemesis(ctx context.Context, cfg Config, cl *clients, paused *pauses) error {
	if len(cfg.Nemeses) == 0 {
		<-ctx.Done()
		return nil
	}
	for n := 0; ; n++ {
		wait := cfg.Every/2 + rand.N(cfg.Every)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		slot := victim(ctx, cfg, cl)
		node := cfg.Cluster.Nodes()[slot]
		ev := Event{Kind: cfg.Nemeses[n%len(cfg.Nemeses)], Gateway: node.Name, Start: time.Now()}
		switch ev.Kind {
		case EventKill:
			if err := cfg.Cluster.Kill(slot); err != nil {
				return fmt.Errorf("kill %s: %w", node.Name, err)
			}
			time.Sleep(cfg.Down)
			ev.End = time.Now()
			cfg.Recorder.Event(ev)
			if err := cfg.Cluster.Restart(slot); err != nil {
				return fmt.Errorf("restart %s: %w", node.Name, err)
			}
			cfg.Logf("nemesis: killed %s at %s, restarted as %s", node.Name, ev.Start.Format("15:04:05.000"), cfg.Cluster.Nodes()[slot].Name)
		case EventPause:
			paused.start(node.Name, ev.Start)
			if err := cfg.Cluster.Pause(slot); err != nil {
				return fmt.Errorf("pause %s: %w", node.Name, err)
			}
			time.Sleep(between(cfg.PauseFor))
			// The end is taken before SIGCONT: the gateway may send a call
			// upstream the instant it runs again, and no call it sends may
			// look as if it left before the pause ended.
			ev.End = time.Now()
			err := cfg.Cluster.Resume(slot)
			paused.end(node.Name, time.Now())
			cfg.Recorder.Event(ev)
			if err != nil {
				return fmt.Errorf("resume %s: %w", node.Name, err)
			}
			cfg.Logf("nemesis: paused %s for %v", node.Name, ev.End.Sub(ev.Start).Round(time.Millisecond))
		}
	}
}

// victim picks the slot to hurt: one whose gateway has a call running
// upstream (it holds that key), waiting up to a second for one; otherwise
// any slot.
func victim(ctx context.Context, cfg Config, cl *clients) int {
	deadline := time.Now().Add(time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if held := cl.heldBy(cfg.Upstream.InFlight()); len(held) > 0 {
			return held[rand.IntN(len(held))]
		}
		time.Sleep(5 * time.Millisecond)
	}
	return rand.IntN(len(cfg.Cluster.Nodes()))
}

// pauses are the nemesis's pauses, so that the watchdog does not count them
// as stalls.
type pauses struct {
	mu sync.Mutex                // guards at
	at map[string][][2]time.Time // by gateway; the end is zero while paused
}

func (p *pauses) start(name string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[string][][2]time.Time{}
	}
	p.at[name] = append(p.at[name], [2]time.Time{t})
}

func (p *pauses) end(name string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.at[name]; len(l) > 0 {
		l[len(l)-1][1] = t
	}
}

// overlap reports whether name was paused at some time in [from, to].
func (p *pauses) overlap(name string, from, to time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, iv := range p.at[name] {
		if !iv[0].After(to) && (iv[1].IsZero() || !iv[1].Before(from)) {
			return true
		}
	}
	return false
}

// watchdog polls every gateway's health URL every 100 ms until ctx is done
// and records, as EventStall, every answer that took cfg.StallAfter or
// longer while no nemesis paused that gateway: the process was starved
// (CPU, a long GC) and may have lost its leases like a paused one.
func watchdog(ctx context.Context, cfg Config, paused *pauses) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for slot := range cfg.Cluster.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := cfg.Cluster.Nodes()[slot]
				if n.Health != "" && n.URL != "" {
					start := time.Now()
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.Health, nil)
					if err != nil {
						return
					}
					res, err := client.Do(req)
					if err == nil {
						io.Copy(io.Discard, res.Body)
						res.Body.Close()
					}
					end := time.Now()
					if err == nil && end.Sub(start) >= cfg.StallAfter && !paused.overlap(n.Name, start, end) {
						cfg.Recorder.Event(Event{Kind: EventStall, Gateway: n.Name, Start: start, End: end})
						cfg.Logf("watchdog: %s did not answer its health probe for %v", n.Name, end.Sub(start).Round(time.Millisecond))
					}
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
}
