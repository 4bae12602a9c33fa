package replication

import (
	"context"
	"errors"
	"fmt"
)

// ErrUnsatisfiable: a store asked to wait for N replicas (sync_replicas)
// whose server cannot give it N: too few replicas, or a PostgreSQL primary
// whose commits do not wait for them. Stores refuse to start with it, the
// fix named in the message.
var ErrUnsatisfiable = errors.New("sync_replicas cannot be satisfied")

// ErrNotReplicated: a write that the store's primary applied, but that
// fewer than sync_replicas replicas confirmed within the bound. The store
// reports it as a failed write (fail closed): the engine keeps an outcome
// it could not record and writes it again, and frees a reservation whose
// answer this was once the store answers.
var ErrNotReplicated = errors.New("write not confirmed by the replicas")

// Mode is how a store's writes reach its replicas.
type Mode string

const (
	// None: no replica is connected. A failover has nothing to promote;
	// the promise holds as long as this server's data does.
	None Mode = "none"
	// Async: replicas are connected but a write is answered before they
	// have it. A failover may lose the last writes.
	Async Mode = "async"
	// Sync: every write is answered only once Status.Synchronous replicas
	// have it (PostgreSQL's synchronous standbys, Redis's WAIT). A
	// failover to one of them loses nothing idem answered.
	Sync Mode = "sync"
	// Unknown: the store could not read how its server replicates (a
	// role without the rights to read it, a managed server that hides it).
	Unknown Mode = "unknown"
)

// Modes are the values of Mode, in the order the gateway's metric lists
// them.
var Modes = []Mode{None, Async, Sync, Unknown}

// Status is how a store's server replicates, as read at one moment.
type Status struct {
	Mode Mode
	// Replicas is how many replicas are connected to the primary.
	Replicas int
	// Synchronous is how many of them every write waits for.
	Synchronous int
	// SyncReplicas is the store's sync_replicas setting (0: not set).
	SyncReplicas int
	// Detail is what the store read, in the server's own words, for the
	// log line.
	Detail string
}

// Warn reports whether the status deserves a warning at start: replicas
// the writes do not wait for, so that a failover may break the promise.
func (s Status) Warn() bool { return s.Mode == Async || s.Mode == Unknown }

// Promise says in one sentence what a failover would do to idem's promise.
func (s Status) Promise() string {
	switch s.Mode {
	case None:
		return "no replica: no failover can lose idem's writes (the promise lasts as long as this server's data)"
	case Sync:
		return fmt.Sprintf("every write waits for %d replica(s): a failover to one of them keeps the promise", s.Synchronous)
	case Async:
		return fmt.Sprintf("%d replica(s) replicate asynchronously: a failover may lose the last writes, and a key may run twice or a retry get another outcome; set idem_sync_replicas=N in the store DSN (and make the replicas synchronous) to keep the promise", s.Replicas)
	}
	return "how the store replicates is unknown: a failover may lose the last writes; grant the store's user the rights to read it (PostgreSQL: pg_monitor) or set idem_sync_replicas=N"
}

// Reporter is a store that can tell how its server replicates.
type Reporter interface {
	Replication(ctx context.Context) (Status, error)
}
