package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/idem-dev/idem/store/replication"
)

// primaryInfo is what a primary says of its replication.
type primaryInfo struct {
	// info is INFO replication's text.
	info string
	// minReplicas is min-replicas-to-write, "" when unknown.
	minReplicas string
}

// online counts the replicas INFO replication lists as online, and tells
// whether the server is a replica itself.
func (p primaryInfo) online() (n int, isReplica bool) {
	for _, line := range strings.Split(p.info, "\n") {
		line = strings.TrimSpace(line)
		if line == "role:slave" {
			isReplica = true
		}
		// slave0:ip=...,port=...,state=online,offset=...,lag=0
		if k, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(k, "slave") && k != "slave_read_only" &&
			strings.Contains(v, "state=online") {
			n++
		}
	}
	return n, isReplica
}

// Replication implements replication.Reporter: INFO replication of the
// primary (of each shard's, on a cluster, counting the fewest replicas),
// and min-replicas-to-write. With SyncReplicas set it fails with
// replication.ErrUnsatisfiable when a primary has fewer replicas online,
// the fix in the message.
func (s *Store) Replication(ctx context.Context) (replication.Status, error) {
	if err := s.check(ctx, "replication"); err != nil {
		return replication.Status{}, err
	}
	infos, err := s.client.replication(ctx)
	if err != nil {
		return replication.Status{}, s.wrap(ctx, "replication", err)
	}
	st := replication.Status{SyncReplicas: s.syncReplicas, Replicas: -1}
	var details []string
	for _, p := range infos {
		n, isReplica := p.online()
		if isReplica {
			return st, fmt.Errorf("redisstore: replication: the server is a replica (role:slave): point the store at the primary")
		}
		if st.Replicas < 0 || n < st.Replicas {
			st.Replicas = n
		}
		d := fmt.Sprintf("%d replica(s) online", n)
		if p.minReplicas != "" {
			d += ", min-replicas-to-write " + p.minReplicas
		}
		details = append(details, d)
	}
	st.Replicas = max(st.Replicas, 0)
	st.Detail = strings.Join(details, "; ")
	switch {
	case s.syncReplicas > 0:
		st.Mode, st.Synchronous = replication.Sync, s.syncReplicas
		st.Detail += "; every write waits (WAIT) for " + strconv.Itoa(s.syncReplicas)
		if st.Replicas < s.syncReplicas {
			return st, fmt.Errorf("redisstore: %w: idem_sync_replicas=%d but a primary has %d replica(s) online (%s): add replicas (replicaof) or lower idem_sync_replicas",
				replication.ErrUnsatisfiable, s.syncReplicas, st.Replicas, st.Detail)
		}
	case st.Replicas == 0:
		st.Mode = replication.None
	default:
		// min-replicas-to-write refuses writes while too few replicas are
		// connected; it does not wait for them to have a write.
		st.Mode = replication.Async
	}
	return st, nil
}
