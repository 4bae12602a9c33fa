package main

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-dev/idem"
)

// expiredCounter is the optional store method behind `cleanup --dry-run`:
// how many records have expired, on the store's clock, without removing
// them.
type expiredCounter interface {
	CountExpired(ctx context.Context) (int, error)
}

// CleanupCommand removes expired records.
type CleanupCommand struct{ m *Main }

// Run parses flags and cleans the store.
func (c *CleanupCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.flagSet("cleanup", "cleanup [--store DSN | --admin URL] [--dry-run] [--batch N]")
	storeFlag := fs.String("store", "", "store `DSN`: memory:, file:PATH, postgres://..., redis://..., redis-cluster://..., s3://...\n(default $IDEM_STORE, the config's store, or file:./idem-data)")
	af := c.m.addAdminFlags(fs)
	configPath := fs.String("config", "", "read the store DSN from this config `file`")
	dryRun := fs.Bool("dry-run", false, "count the expired records without removing them")
	batch := fs.Int("batch", 1000, "records removed per store transaction")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("cleanup: unexpected arguments %q", fs.Args())
	}
	ac, err := af.client(c.m)
	if err != nil {
		return err
	}
	if ac != nil {
		return c.m.adminCleanup(ctx, ac, *batch, *dryRun)
	}
	opened, err := c.m.openStore(ctx, *storeFlag, *configPath)
	if err != nil {
		return err
	}
	defer opened.Close()

	if *dryRun {
		ec, ok := opened.Store.(expiredCounter)
		if !ok {
			return fmt.Errorf("cleanup --dry-run: the %s store cannot count expired records without removing them; nothing was removed", opened.DSN.Kind)
		}
		n, err := ec.CountExpired(ctx)
		if err != nil {
			return fmt.Errorf("cleanup --dry-run: %w", err)
		}
		fmt.Fprintf(c.m.Stdout, "%d expired records in %s (dry run: nothing removed)\n", n, opened.DSN)
		return nil
	}

	// No background cleanup: this command is the cleanup.
	eng := idem.New(opened.Store, idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	start := time.Now()
	p := c.m.progress()
	n, err := eng.Cleanup(ctx, *batch, p.update)
	p.end()
	if err != nil {
		return fmt.Errorf("cleanup: removed %d records, then: %w", n, err)
	}
	fmt.Fprintf(c.m.Stdout, "removed %d expired records from %s in %v\n", n, opened.DSN, time.Since(start).Round(time.Millisecond))
	return nil
}
