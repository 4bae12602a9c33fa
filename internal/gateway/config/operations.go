package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Operations are the settings of running the gateway under a supervisor
// and behind a load balancer: readiness and draining.
type Operations struct {
	// DrainDelay is how long the gateway keeps serving after a stop signal
	// while /readyz answers 503, so that a load balancer notices and stops
	// sending before the listener closes. 0 (the default, for a gateway run
	// by hand) closes at once; behind a load balancer use a little more
	// than its probe interval times its failure threshold (e.g. 5s–15s).
	DrainDelay Duration `yaml:"drain_delay"`
	// UpstreamReady is how /readyz checks the upstream: "tcp" (the
	// default) connects to its host and port; a path such as "/health"
	// asks GET for it and wants any answer below 500; "off" does not
	// check.
	UpstreamReady string `yaml:"upstream_ready"`

	envErrs []error // from ApplyEnv, reported by Validate
}

// UpstreamReadyCheck returns the upstream readiness check: "tcp", "off" or
// a path.
func (o *Operations) UpstreamReadyCheck() string {
	if o.UpstreamReady == "" {
		return "tcp"
	}
	return o.UpstreamReady
}

// DrainDelayDuration returns DrainDelay as a time.Duration.
func (o *Operations) DrainDelayDuration() time.Duration { return time.Duration(o.DrainDelay) }

func (o *Operations) validate() error {
	var errs []error
	if o.DrainDelay < 0 {
		errs = append(errs, errors.New("drain_delay: negative; write 0 to close the listener at once"))
	}
	switch c := o.UpstreamReadyCheck(); {
	case c == "tcp", c == "off":
	case strings.HasPrefix(c, "/"):
	default:
		errs = append(errs, fmt.Errorf("upstream_ready %q: want tcp, off, or a path such as /health", c))
	}
	return errors.Join(errs...)
}
