package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/store/postgres"
)

// MigrateCommand creates or upgrades the PostgreSQL schema, or creates the
// DynamoDB table.
type MigrateCommand struct{ m *Main }

// Run parses flags and migrates.
func (c *MigrateCommand) Run(ctx context.Context, args []string) error {
	fs := c.m.flagSet("migrate", "migrate --store postgres://... | dynamodb://TABLE?region=R")
	storeFlag := fs.String("store", "", "PostgreSQL or DynamoDB store `DSN` (default $IDEM_STORE or the config's store);\n"+
		"?idem_schema=S&idem_table=T choose the schema and table")
	configPath := fs.String("config", "", "read the store DSN from this config `file`")
	drop := fs.Bool("drop", false, "remove the PostgreSQL store instead: its records table, pgtx's recovery points\n"+
		"beside it and its rows in idem_schema_migrations (the table too once empty);\n"+
		"refused while it holds records that have not expired, unless --force")
	force := fs.Bool("force", false, "with --drop: drop records that have not expired too (their keys will run again)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("migrate: unexpected arguments %q", fs.Args())
	}
	dsnStr, err := c.m.storeDSN(*storeFlag, *configPath)
	if err != nil {
		return err
	}
	if *drop {
		return c.drop(ctx, dsnStr, *force)
	}
	if d, err := dsn.Parse(dsnStr); err == nil && d.Kind == dsn.DynamoDB {
		return c.migrateDynamoDB(ctx, dsnStr, d)
	}
	rep, err := dsn.Migrate(ctx, dsnStr)
	if errors.Is(err, dsn.ErrNotPostgres) {
		return fmt.Errorf("%w (the other stores need no migration)", err)
	}
	if err != nil {
		return err
	}
	d, _ := dsn.Parse(dsnStr)
	if rep.Recreated {
		fmt.Fprintf(c.m.Stdout, "%s: the records table was recorded as migrated but did not exist (dropped?); created it again: its earlier records are gone\n", d)
	}
	switch {
	case len(rep.Applied) > 0:
		fmt.Fprintf(c.m.Stdout, "%s: applied %s; schema at version %d\n", d, strings.Join(rep.Applied, ", "), rep.Version)
	default:
		fmt.Fprintf(c.m.Stdout, "%s: schema at version %d (checked: the table and its columns are there; nothing to do)\n", d, rep.Version)
	}
	return nil
}

// drop removes the PostgreSQL store dsnStr names.
func (c *MigrateCommand) drop(ctx context.Context, dsnStr string, force bool) error {
	rep, err := dsn.Drop(ctx, dsnStr, force)
	if errors.Is(err, postgres.ErrLiveRecords) {
		return fmt.Errorf("migrate --drop: %w: their keys would run again; wait until they expire, or add --force", err)
	}
	if err != nil {
		return fmt.Errorf("migrate --drop: %w", err)
	}
	d, _ := dsn.Parse(dsnStr)
	if len(rep.Tables) == 0 {
		fmt.Fprintf(c.m.Stdout, "%s: nothing to drop\n", d)
		return nil
	}
	fmt.Fprintf(c.m.Stdout, "%s: dropped %s (%d records had not expired)\n", d, strings.Join(rep.Tables, ", "), rep.Live)
	return nil
}
