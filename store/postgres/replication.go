package postgres

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/idem-dev/idem/store/replication"
)

// replicationQuery reads how the server replicates: whether it is a
// standby, its synchronous_standby_names, the session's synchronous_commit
// and its streaming standbys, those a commit waits for, and the rows
// pg_stat_replication hides from a role without pg_read_all_stats.
const replicationQuery = `SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'),
	current_setting('synchronous_commit'),
	(SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'),
	(SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')),
	(SELECT count(*) FROM pg_stat_replication WHERE state IS NULL)`

// Replication implements replication.Reporter. With SyncReplicas set it
// fails with replication.ErrUnsatisfiable, the fix in the message, when
// the server's commits would not wait for that many standbys: a session
// whose synchronous_commit is local or off, a synchronous_standby_names
// that names fewer, or fewer of them streaming (every commit would hang).
func (s *Store) Replication(ctx context.Context) (replication.Status, error) {
	if err := s.check(ctx); err != nil {
		return replication.Status{}, err
	}
	var (
		standby                    bool
		names, commit              string
		streaming, syncing, hidden int
	)
	if err := s.pool.QueryRow(ctx, replicationQuery).Scan(&standby, &names, &commit, &streaming, &syncing, &hidden); err != nil {
		return replication.Status{}, wrapErr(ctx, "replication", err)
	}
	st := replication.Status{SyncReplicas: s.opts.SyncReplicas, Replicas: streaming + hidden}
	if standby {
		return st, fmt.Errorf("postgres store: replication: the server is a standby (pg_is_in_recovery): point the store at the primary")
	}
	numSync := standbysWaitedFor(names)
	waits := commit == "on" || commit == "remote_write" || commit == "remote_apply"
	st.Detail = fmt.Sprintf("%d standby(s) streaming, %d of them synchronous; synchronous_standby_names %q; synchronous_commit %s",
		streaming, syncing, names, commit)
	switch {
	case hidden > 0:
		st.Mode = replication.Unknown
		st.Detail += fmt.Sprintf("; %d standby(s) hidden from this role (GRANT pg_monitor TO it)", hidden)
	case numSync > 0 && waits && syncing >= numSync:
		st.Mode, st.Synchronous = replication.Sync, numSync
	case streaming == 0 && numSync == 0:
		st.Mode = replication.None
	default:
		st.Mode = replication.Async
	}
	n := s.opts.SyncReplicas
	if n <= 0 {
		return st, nil
	}
	fail := func(format string, args ...any) (replication.Status, error) {
		return st, fmt.Errorf("postgres store: %w: idem_sync_replicas=%d but "+format, append([]any{replication.ErrUnsatisfiable, n}, args...)...)
	}
	switch {
	case !waits:
		return fail("the session's synchronous_commit is %s, so a commit waits for no standby: set it to on (ALTER ROLE ... SET synchronous_commit = on, or options=-c synchronous_commit=on in the DSN)", commit)
	case numSync < n:
		return fail("the primary's synchronous_standby_names %q makes a commit wait for %d standby(s): set it to 'FIRST %d (NAMES)' or 'ANY %d (NAMES)' naming the standbys' application_name", names, numSync, n, n)
	case hidden > 0:
		return fail("pg_stat_replication hides %d standby(s) from this role, so they cannot be counted: GRANT pg_monitor TO the store's user", hidden)
	case syncing < numSync:
		return fail("%d of the %d synchronous standby(s) that synchronous_standby_names %q asks for are streaming, so every write would wait: start them (or lower the number)", syncing, numSync, names)
	}
	st.Mode, st.Synchronous = replication.Sync, numSync
	return st, nil
}

// numbered is synchronous_standby_names' FIRST n (...), ANY n (...) or
// n (...).
var numbered = regexp.MustCompile(`(?i)^\s*(?:(?:FIRST|ANY)\s+)?(\d+)\s*\(`)

// standbysWaitedFor is how many standbys a commit waits for under the
// synchronous_standby_names names: 0 for "", the number of a FIRST n,
// ANY n or n (list), and 1 for a plain list (PostgreSQL's FIRST 1).
func standbysWaitedFor(names string) int {
	if strings.TrimSpace(names) == "" {
		return 0
	}
	if m := numbered.FindStringSubmatch(names); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 1
}
