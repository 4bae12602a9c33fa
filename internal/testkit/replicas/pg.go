package replicas

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// StandbyName is the application_name every replica of PG streams under,
// which a synchronous primary names in synchronous_standby_names.
const StandbyName = "idem_replica"

// PGOptions shape a PostgreSQL primary and its replica.
type PGOptions struct {
	// Sync makes replication synchronous: every server of the pair starts
	// with synchronous_standby_names = StandbyName (a replica ignores it
	// until it is promoted).
	Sync bool
	// Delay is added to each direction of the replication link.
	Delay time.Duration
	// NoReplica starts the primary alone; Failover is then not possible.
	NoReplica bool
}

// PG is a PostgreSQL primary with a streaming replica, each on its own
// port and directory, run as user postgres when the tests run as root
// (initdb refuses root). Clients reach the primary through VIP, a
// forwarder standing for a virtual IP; the replica streams through a
// forwarder that delays the link by PGOptions.Delay.
type PG struct {
	t      testing.TB
	bin    string
	asUser string
	opts   PGOptions
	// VIP is the address clients use; Failover moves it to the new
	// primary.
	VIP              *Forwarder
	primary, replica *pgNode
	link             *Forwarder
	seq              int
}

type pgNode struct {
	dir  string
	port int
}

func (n *pgNode) data() string { return filepath.Join(n.dir, "data") }

// StartPG starts a primary, and unless opts.NoReplica a replica streaming
// from it, and waits until the replica streams. Everything stops when t
// ends. The servers run with fsync off: the tests kill processes, not the
// machine.
func StartPG(t testing.TB, opts PGOptions) *PG {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if dir := os.Getenv("IDEM_TEST_PG_BIN"); dir != "" {
		bins = []string{filepath.Join(dir, "initdb")}
	}
	slices.Sort(bins)
	if len(bins) == 0 {
		testenv.Unavailable(t, "no PostgreSQL server binaries (initdb) under /usr/lib/postgresql/*/bin or IDEM_TEST_PG_BIN")
	}
	p := &PG{t: t, bin: filepath.Dir(bins[len(bins)-1]), opts: opts}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			testenv.Unavailable(t, "running as root and there is no postgres user for initdb: %v", err)
		}
		p.asUser = "postgres"
	}
	p.primary = p.newNode()
	if err := p.run("initdb", "-D", p.primary.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	p.start(p.primary, false)
	p.VIP = NewForwarder(t, hostPort(p.primary.port), 0)
	if !opts.NoReplica {
		p.attachReplica()
	}
	return p
}

// DSN is the DSN of the primary through the virtual IP.
func (p *PG) DSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", p.VIP.Addr())
}

// PrimaryDSN is the DSN of the current primary, not through the virtual
// IP.
func (p *PG) PrimaryDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.primary.port)
}

// ReplicaDSN is the DSN of the current replica.
func (p *PG) ReplicaDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.replica.port)
}

// Link is the replication link of the current replica: Cut stops the
// replica from receiving the primary's writes.
func (p *PG) Link() *Forwarder { return p.link }

// Failover does what an operator's failover does when the primary's
// machine dies: the replication link drops what is in flight, the
// primary's processes are killed with SIGKILL, the replica is promoted and
// the virtual IP moved to it. Connections through the virtual IP break.
// Then a new replica is made from the new primary (pg_basebackup) and
// streams from it, so that the pair can fail over again. It returns once
// the new primary takes writes; the new replica streams by the time
// WaitStreaming returns.
func (p *PG) Failover() {
	p.t.Helper()
	old := p.primary
	p.link.Cut()
	p.kill(old)
	p.VIP.Cut()
	if err := p.run("pg_ctl", "-D", p.replica.data(), "-w", "-t", "60", "promote"); err != nil {
		p.t.Fatal(err)
	}
	p.primary, p.replica = p.replica, nil
	p.VIP.Switch(hostPort(p.primary.port))
	_ = os.RemoveAll(old.dir)
	p.attachReplica()
}

// Stop stops the primary, mode "immediate" as a crash that the next Start
// recovers from the WAL; a stopped primary is left as it is.
func (p *PG) Stop(mode string) {
	p.t.Helper()
	if _, err := os.Stat(filepath.Join(p.primary.data(), "postmaster.pid")); err != nil {
		return
	}
	if err := p.run("pg_ctl", "-D", p.primary.data(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		p.t.Fatal(err)
	}
}

// Start starts the primary again after Stop.
func (p *PG) Start() {
	p.t.Helper()
	p.start(p.primary, false)
}

// Signal sends sig to the primary's postmaster and every process it
// started (SignalPostmaster): SIGSTOP freezes it, SIGCONT thaws it.
func (p *PG) Signal(sig syscall.Signal) {
	p.t.Helper()
	if _, err := SignalPostmaster(p.primary.data(), sig); err != nil {
		p.t.Fatal(err)
	}
}

// attachReplica makes a replica of the primary with pg_basebackup, starts
// it streaming through a new delaying link, and waits until it streams.
func (p *PG) attachReplica() {
	p.t.Helper()
	if p.link != nil {
		p.link.Close()
	}
	p.link = NewForwarder(p.t, hostPort(p.primary.port), p.opts.Delay)
	r := p.newNode()
	if err := p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primary.port), "-U", "postgres",
		"-D", r.data(), "-R", "-X", "stream", "--no-sync", "-c", "fast"); err != nil {
		p.t.Fatal(err)
	}
	p.replica = r
	p.start(r, true)
	p.WaitStreaming()
}

// WaitStreaming waits until the primary's pg_stat_replication shows the
// replica streaming, and synchronous when PGOptions.Sync says so.
func (p *PG) WaitStreaming() {
	p.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := pgx.Connect(ctx, p.PrimaryDSN())
		if err == nil {
			var n int
			err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'
				AND application_name = $1 AND (sync_state = 'sync' OR NOT $2)`, StandbyName, p.opts.Sync).Scan(&n)
			conn.Close(ctx)
			if err == nil && n > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.replica.dir, "log"))
			p.t.Fatalf("the replica does not stream: %v\nreplica log:\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *PG) newNode() *pgNode {
	p.t.Helper()
	p.seq++
	dir, err := os.MkdirTemp("", "idem-pgha-")
	if err != nil {
		p.t.Fatal(err)
	}
	if p.asUser != "" {
		u, _ := user.Lookup(p.asUser)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			p.t.Fatal(err)
		}
	}
	n := &pgNode{dir: dir, port: spare(p.t)}
	p.t.Cleanup(func() {
		p.kill(n)
		_ = os.RemoveAll(dir)
	})
	return n
}

// start starts n; a replica streams from the primary through the link.
func (p *PG) start(n *pgNode, replica bool) {
	p.t.Helper()
	o := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=100 -c shared_buffers=16MB"+
		" -c fsync=off -c wal_retrieve_retry_interval=100ms -c wal_receiver_status_interval=1s", n.port, n.dir)
	if p.opts.Sync {
		o += " -c synchronous_standby_names=" + StandbyName
	}
	if replica {
		// pg_ctl hands the options to a shell; postgres takes the value
		// after -c name= as it is, quotes included.
		o += fmt.Sprintf(` -c "primary_conninfo=host=127.0.0.1 port=%d user=postgres application_name=%s"`, p.link.Port(), StandbyName)
	}
	if err := p.run("pg_ctl", "-D", n.data(), "-l", filepath.Join(n.dir, "log"), "-w", "-t", "60", "-o", o, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(n.dir, "log"))
		p.t.Fatalf("%v\nserver log:\n%s", err, log)
	}
}

// kill sends SIGKILL to n's postmaster and every process it started, as
// the death of its machine would end them all at once.
func (p *PG) kill(n *pgNode) {
	master, err := SignalPostmaster(n.data(), syscall.SIGKILL)
	if err != nil {
		return
	}
	for range 200 { // until the kernel has it gone
		if syscall.Kill(master, 0) != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = os.Remove(filepath.Join(n.data(), "postmaster.pid"))
}

// SignalPostmaster sends sig to the postmaster of the data directory data
// (its postmaster.pid) and to every process it started, and returns the
// postmaster's pid: SIGSTOP freezes the server with its sockets open, as a
// network partition would; SIGKILL ends it as its machine's death would
// (the postmaster is stopped first, so that it starts no backend the kill
// would miss).
func SignalPostmaster(data string, sig syscall.Signal) (int, error) {
	pidFile, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	master, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("%s/postmaster.pid: %w", data, err)
	}
	if sig == syscall.SIGKILL {
		_ = syscall.Kill(master, syscall.SIGSTOP)
	}
	for _, pid := range children(master) {
		_ = syscall.Kill(pid, sig)
	}
	_ = syscall.Kill(master, sig)
	return master, nil
}

// children are the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			c, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, c)
		}
	}
	return out
}

func (p *PG) run(prog string, args ...string) error {
	cmd := exec.Command(filepath.Join(p.bin, prog), args...)
	if p.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", p.asUser, "--", cmd.Path}, args...)...)
	}
	cmd.Dir = os.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
	return nil
}
