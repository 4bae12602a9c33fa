package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idem-dev/idem/internal/gateway/dsn"
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
