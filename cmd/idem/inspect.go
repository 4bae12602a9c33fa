package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/gateway/inspect"
	"github.com/idem-dev/idem/store"
)

// InspectCommand prints one record.
type InspectCommand struct{ m *Main }

// Run parses flags and prints the record of --scope and --key as JSON.
func (c *InspectCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.flagSet("inspect", "inspect [--store DSN | --admin URL] [--scope S] --key K")
	storeFlag := fs.String("store", "", "store `DSN`: memory:, file:PATH, postgres://..., redis://..., redis-cluster://..., s3://...\n(default $IDEM_STORE, the config's store, or file:./idem-data)")
	af := c.m.addAdminFlags(fs)
	configPath := fs.String("config", "", "read the store DSN from this config `file`")
	scope := fs.String("scope", "", "the key's `scope`: the tenant (\"\" for the anonymous scope, X-User-ID's value, or cred:HASH);\n"+
		"TENANT|METHOD /path for the stripe and mobile profiles. --path finds it instead")
	method := fs.String("method", "POST", "with --path: the request's `method`")
	path := fs.String("path", "", "find the scope as the gateway's routes (--config) do for this request `path`")
	tenant := fs.String("tenant", "", "with --path: the caller's `tenant` (X-User-ID's value, or cred:HASH; \"\" is anonymous)")
	key := fs.String("key", "", "the idempotency `key`")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("inspect: unexpected arguments %q", fs.Args())
	}
	k := strings.TrimSpace(*key)
	if k == "" {
		fs.Usage()
		return errors.New("inspect: --key is required")
	}
	ac, err := af.client(c.m)
	if err != nil {
		return err
	}
	if ac != nil {
		return ac.inspect(ctx, c.m.Stdout, *scope, k)
	}
	opened, err := c.m.openStore(ctx, *storeFlag, *configPath)
	if err != nil {
		return err
	}
	defer opened.Close()
	if *path != "" {
		if *scope, err = routeScope(opened.Store, *configPath, *method, *path, *tenant); err != nil {
			return err
		}
	}
	rec, err := idem.FindRecord(ctx, opened.Store, *scope, k)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("inspect: no live record for scope %q and key %q in %s", *scope, k, opened.DSN)
	}
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	b, err := inspect.Marshal(inspect.New(rec))
	if err != nil {
		return err
	}
	_, err = c.m.Stdout.Write(b)
	return err
}

// routeScope finds the scope of a request as the gateway's routes do.
func routeScope(s store.Store, configPath, method, path, tenant string) (string, error) {
	if configPath == "" {
		return "", errors.New("inspect: --path needs --config, whose routes decide the scope")
	}
	cfg, err := config.Load(configPath)
	if err != nil {
		return "", err
	}
	built, err := cfg.Build()
	if err != nil {
		return "", err
	}
	eng := idem.New(s, built.Policy)
	defer eng.Close()
	routes, err := idemhttp.Compile(eng, built.Options)
	if err != nil {
		return "", err
	}
	scope, ok := routes.Scope(method, path, tenant)
	if !ok {
		return "", fmt.Errorf("inspect: no route of %s covers %s %s", configPath, method, path)
	}
	return scope, nil
}
