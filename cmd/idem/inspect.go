package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idem-dev/idem/internal/inspect"
	"github.com/idem-dev/idem/store"
)

// InspectCommand prints one record.
type InspectCommand struct{ m *Main }

// Run parses flags and prints the record of --scope and --key as JSON.
func (c *InspectCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.flagSet("inspect", "inspect --store DSN [--scope S] --key K")
	storeFlag := fs.String("store", "", "store `DSN` (default $IDEM_STORE, the config's store, or file:./idem-data)")
	configPath := fs.String("config", "", "read the store DSN from this config `file`")
	scope := fs.String("scope", "", "the key's `scope`: \"\" without tenants; the tenant (X-User-ID's value, or auth:HASH)\n"+
		"for tenant scopes; TENANT|METHOD /path for the stripe and mobile profiles")
	key := fs.String("key", "", "the idempotency `key`")
	if err := fs.Parse(args); err != nil {
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
	opened, err := c.m.openStore(ctx, *storeFlag, *configPath)
	if err != nil {
		return err
	}
	defer opened.Close()
	now := time.Now()
	rec, err := opened.Get(ctx, *scope, store.HashKey(*scope, k), now)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("inspect: no live record for scope %q and key %q in %s", *scope, k, opened.DSN)
	}
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	b, err := inspect.Marshal(inspect.New(rec, now))
	if err != nil {
		return err
	}
	_, err = c.m.Stdout.Write(b)
	return err
}
