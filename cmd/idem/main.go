package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/seal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	m := NewMain()
	err := m.Run(ctx, os.Args[1:])
	stop()
	os.Exit(m.exitCode(err))
}

// errNoCommand: idem was run without a command; the usage was printed.
var errNoCommand = errors.New("no command")

// usageError is a command line the flag package refused; it has printed
// the error and the command's usage already, so main prints nothing more.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode reports err on m.Stderr, unless it was reported already, and
// returns the process's exit status: 0, 1 for a failure, 2 for a command
// line that could not be understood.
func (m *Main) exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNoCommand), errors.As(err, &ue):
		return 2
	}
	// The error may quote a store DSN, or a driver's message about it.
	fmt.Fprintln(m.Stderr, "idem:", m.redactor.String(err.Error()))
	return 1
}

// Main is the program; its fields are the process's environment, so that
// tests can run commands in-process.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// Getwd returns the working directory; nil means os.Getwd.
	Getwd func() (string, error)
	// redactor hides the secrets of the store DSN the command uses in
	// what it prints; nil hides those of any DSN quoted (dsn.Redact).
	redactor *dsn.Redactor
}

// NewMain returns a Main on the process's standard streams and environment.
func NewMain() *Main {
	return &Main{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// Run runs the subcommand named by args[0].
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		m.usage()
		return errNoCommand
	}
	err := m.run(ctx, args[0], args[1:])
	if errors.Is(err, flag.ErrHelp) {
		// "idem serve -h": the usage was asked for and printed.
		return nil
	}
	return err
}

func (m *Main) run(ctx context.Context, cmd string, rest []string) error {
	switch cmd {
	case "serve":
		return (&ServeCommand{m}).Run(ctx, rest)
	case "cleanup":
		return (&CleanupCommand{m}).Run(ctx, rest)
	case "inspect":
		return (&InspectCommand{m}).Run(ctx, rest)
	case "migrate":
		return (&MigrateCommand{m}).Run(ctx, rest)
	case "version", "--version", "-version":
		return (&VersionCommand{m}).Run(ctx, rest)
	case "release":
		return (&ReleaseCommand{m}).Run(ctx, rest)
	case "demo":
		return (&DemoCommand{m}).Run(ctx, rest)
	case "demo-api": // hidden: the demo's upstream on its own, for tests
		return (&DemoAPICommand{m}).Run(ctx, rest)
	case "help", "-h", "-help", "--help":
		m.usage()
		return nil
	}
	m.usage()
	err := fmt.Errorf("unknown command %q", cmd)
	fmt.Fprintln(m.Stderr, "idem:", err)
	return usageError{err}
}

func (m *Main) usage() {
	fmt.Fprint(m.Stderr, `idem makes retries safe: a reverse proxy that runs each Idempotency-Key once
and replays its response to every retry.

Usage:

	idem <command> [arguments]

Commands:

	serve     run the gateway in front of an upstream API
	cleanup   remove expired records from a store (or through a running gateway: --admin URL)
	inspect   print one record as JSON (or through a running gateway: --admin URL)
	release   free a key whose outcome is unknown, through a running gateway
	migrate   create or upgrade the PostgreSQL schema
	demo      run a demo payments API behind the gateway, with curl commands to try
	version   print the version (also: idem --version)

Run "idem <command> -h" for a command's flags. Stores are named by DSN:
`+dsn.Usage("  ")+`
`)
}

// parse parses args into fs. A refused command line comes back as a
// usageError, since the flag package has printed it already.
func parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err}
}

// flagSet returns a flag set that reports errors (not exits) and prints
// its usage to m.Stderr.
func (m *Main) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(m.Stderr, "Usage: idem %s\n\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// newLogger returns a slog logger writing text or JSON to w.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	lvl, err := config.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// storeDSN resolves the store of the maintenance commands: the flag, else
// IDEM_STORE, else the config file's (--config or IDEM_CONFIG), else the
// default.
func (m *Main) storeDSN(flagValue, configPath string) (d string, err error) {
	defer func() {
		if err == nil {
			m.redactor = dsn.NewRedactor(d)
		}
	}()
	if flagValue != "" {
		return flagValue, nil
	}
	if v := m.Getenv("IDEM_STORE"); v != "" {
		return v, nil
	}
	if configPath == "" {
		configPath = m.Getenv("IDEM_CONFIG")
	}
	if configPath != "" {
		c, err := config.Load(configPath)
		if err != nil {
			return "", err
		}
		if c.Store != "" {
			return c.Store, nil
		}
	}
	return m.defaultStore(), nil
}

// defaultStore is the store when none is named: file:./idem-data, in the
// directory idem runs in; under systemd (which runs services in /) the
// unit's StateDirectory ($STATE_DIRECTORY), else /var/lib/idem.
func (m *Main) defaultStore() string {
	if d := m.Getenv("STATE_DIRECTORY"); d != "" {
		// systemd lists one directory per StateDirectory entry.
		d, _, _ = strings.Cut(d, ":")
		return "file:" + filepath.Join(d, "idem-data")
	}
	getwd := m.Getwd
	if getwd == nil {
		getwd = os.Getwd
	}
	if wd, err := getwd(); err == nil && wd == "/" {
		return "file:/var/lib/idem/idem-data"
	}
	return config.DefaultStore
}

// openStore opens the store of a maintenance command (see storeDSN).
func (m *Main) openStore(ctx context.Context, flagValue, configPath string) (*dsn.Opened, error) {
	dsnStr, err := m.storeDSN(flagValue, configPath)
	if err != nil {
		return nil, err
	}
	// Store messages at warn and above only: recovery's INFO lines are noise
	// in a command's output.
	quiet := slog.New(m.redactor.Handler(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	opened, err := dsn.Open(ctx, dsnStr, dsn.Options{Logger: quiet})
	if err != nil {
		return nil, err
	}
	// Sealed records are read through the secret the gateway seals with.
	ring, err := m.keyring(configPath)
	if err != nil {
		opened.Close()
		return nil, err
	}
	if ring != nil {
		opened.Store = seal.Wrap(opened.Store, ring)
	}
	return opened, nil
}

// keyring is the secret of the maintenance commands: IDEM_SECRET or
// IDEM_SECRET_FILE, else the config file's; nil when none is set.
func (m *Main) keyring(configPath string) (*seal.Keyring, error) {
	if configPath == "" {
		configPath = m.Getenv("IDEM_CONFIG")
	}
	c := &config.Config{}
	if configPath != "" {
		var err error
		if c, err = config.Load(configPath); err != nil {
			return nil, err
		}
	}
	c.ApplyEnv(m.Getenv)
	return c.Keyring()
}
