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
	"syscall"

	"github.com/idem-dev/idem/internal/config"
	"github.com/idem-dev/idem/internal/dsn"
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
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(m.Stderr, "idem:", err)
		os.Exit(1)
	}
}

// Main is the program; its fields are the process's environment, so that
// tests can run commands in-process.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// NewMain returns a Main on the process's standard streams and environment.
func NewMain() *Main {
	return &Main{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// Run runs the subcommand named by args[0].
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		m.usage()
		return flag.ErrHelp
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return (&ServeCommand{m}).Run(ctx, rest)
	case "cleanup":
		return (&CleanupCommand{m}).Run(ctx, rest)
	case "inspect":
		return (&InspectCommand{m}).Run(ctx, rest)
	case "migrate":
		return (&MigrateCommand{m}).Run(ctx, rest)
	case "version":
		return (&VersionCommand{m}).Run(ctx, rest)
	case "demo":
		return (&DemoCommand{m}).Run(ctx, rest)
	case "demo-api": // hidden: the demo's upstream on its own, for tests
		return (&DemoAPICommand{m}).Run(ctx, rest)
	case "help", "-h", "-help", "--help":
		m.usage()
		return nil
	}
	m.usage()
	return fmt.Errorf("unknown command %q", cmd)
}

func (m *Main) usage() {
	fmt.Fprint(m.Stderr, `idem makes retries safe: a reverse proxy that runs each Idempotency-Key once
and replays its response to every retry.

Usage:

	idem <command> [arguments]

Commands:

	serve     run the gateway in front of an upstream API
	cleanup   remove expired records from a store
	inspect   print one record as JSON
	migrate   create or upgrade the PostgreSQL schema
	demo      run a demo payments API behind the gateway, with curl commands to try
	version   print the version

Run "idem <command> -h" for a command's flags. Stores are named by DSN:
memory:, file:PATH (default file:./idem-data), postgres://..., redis://...
`)
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
func (m *Main) storeDSN(flagValue, configPath string) (string, error) {
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
	return config.DefaultStore, nil
}

// openStore opens the store of a maintenance command (see storeDSN).
func (m *Main) openStore(ctx context.Context, flagValue, configPath string) (*dsn.Opened, error) {
	dsnStr, err := m.storeDSN(flagValue, configPath)
	if err != nil {
		return nil, err
	}
	opened, err := dsn.Open(ctx, dsnStr, dsn.Options{})
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
