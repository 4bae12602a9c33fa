package main

import (
	"context"
	"fmt"

	"github.com/idem-dev/idem/internal/gateway/dsn"
)

// migrateDynamoDB creates the DynamoDB table when it does not exist and
// turns its native TTL on. A server or table where native TTL cannot be
// turned on (dynalite) is a warning on stderr, not a failure: expiry never
// relies on it.
func (c *MigrateCommand) migrateDynamoDB(ctx context.Context, dsnStr string, d dsn.DSN) error {
	rep, err := dsn.MigrateDynamoDB(ctx, dsnStr)
	if err != nil {
		return err
	}
	if rep.Created {
		fmt.Fprintf(c.m.Stdout, "%s: created the table (hash key pk, a string; billed per request)\n", d)
	} else {
		fmt.Fprintf(c.m.Stdout, "%s: the table is there with the right key; nothing to create\n", d)
	}
	if rep.TTLWarning != nil {
		fmt.Fprintf(c.m.Stderr, "idem: warning: %v\n", rep.TTLWarning)
		return nil
	}
	fmt.Fprintf(c.m.Stdout, "%s: native TTL on attribute expires: %s\n", d, rep.TTL)
	return nil
}
