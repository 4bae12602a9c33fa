package dsn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/replicas"
	"github.com/idem-dev/idem/store/replication"
)

// TestOpenReplication: Open reads how a PostgreSQL or Redis store's server
// replicates (no replica, asynchronous, synchronous) into
// Opened.Replication, and refuses an idem_sync_replicas the server cannot
// satisfy, naming the fix.
func TestOpenReplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(t *testing.T, dsn string) (*replication.Status, error) {
		t.Helper()
		o, err := Open(ctx, dsn, Options{Migrate: true, ConnectTimeout: time.Minute})
		if err != nil {
			return nil, err
		}
		defer o.Close()
		if o.Replication == nil {
			t.Fatalf("%s: no replication status", dsn)
		}
		return o.Replication, nil
	}
	check := func(t *testing.T, dsn string, want replication.Mode) {
		t.Helper()
		st, err := open(t, dsn)
		if err != nil || st.Mode != want {
			t.Fatalf("%s: %+v, %v; want mode %s", dsn, st, err, want)
		}
	}
	refused := func(t *testing.T, dsn, fix string) {
		t.Helper()
		st, err := open(t, dsn)
		if !errors.Is(err, replication.ErrUnsatisfiable) || !strings.Contains(err.Error(), fix) {
			t.Fatalf("%s: %+v, %v; want ErrUnsatisfiable naming %q", dsn, st, err, fix)
		}
	}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		alone := replicas.StartPG(t, replicas.PGOptions{NoReplica: true})
		check(t, alone.DSN(), replication.None)
		refused(t, alone.DSN()+"&idem_sync_replicas=1", "synchronous_standby_names")
		async := replicas.StartPG(t, replicas.PGOptions{})
		check(t, async.DSN(), replication.Async)
		refused(t, async.DSN()+"&idem_sync_replicas=1", "synchronous_standby_names")
		sync := replicas.StartPG(t, replicas.PGOptions{Sync: true})
		check(t, sync.DSN(), replication.Sync)
		check(t, sync.DSN()+"&idem_sync_replicas=1", replication.Sync)
		refused(t, sync.DSN()+"&idem_sync_replicas=2", "FIRST 2")
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		alone := replicas.StartRedis(t, replicas.RedisOptions{NoReplica: true})
		check(t, "redis://"+alone.Addr(), replication.None)
		refused(t, "redis://"+alone.Addr()+"?idem_sync_replicas=1", "add replicas")
		r := replicas.StartRedis(t, replicas.RedisOptions{})
		check(t, "redis://"+r.Addr(), replication.Async)
		check(t, "redis://"+r.Addr()+"?idem_sync_replicas=1", replication.Sync)
		refused(t, "redis://"+r.Addr()+"?idem_sync_replicas=2", "add replicas")
	})
}
