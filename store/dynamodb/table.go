package dynamodbstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// ErrTableMissing: the table does not exist.
var ErrTableMissing = errors.New("dynamodbstore: table does not exist")

// ErrTableShape: the table exists with another key than the store's.
var ErrTableShape = errors.New("dynamodbstore: table has the wrong key")

// MigrateReport says what Migrate did.
type MigrateReport struct {
	// Created: the table did not exist and was created.
	Created bool
	// TTL is the state of native TTL on TTLAttribute after Migrate:
	// "enabled" (just now), "already enabled", or "" when it could not be
	// enabled (see TTLWarning).
	TTL string
	// TTLWarning says why native TTL is not on. Expiry never relies on
	// it (records are judged expired by their readers), so it is a
	// warning: expired items then stay until Cleanup removes them.
	TTLWarning error
}

// Migrate creates table when it does not exist: a hash key "pk" of type
// string, billed per request, and waits until it is active. It then turns
// DynamoDB's native TTL on for TTLAttribute, best effort: a server that
// cannot (dynalite answers UpdateTimeToLive with UnknownOperationException)
// or a table whose TTL is on another attribute gives a TTLWarning, not an
// error. A table that exists with another key is an error (ErrTableShape).
func Migrate(ctx context.Context, client *dynamodb.Client, table string) (MigrateReport, error) {
	var rep MigrateReport
	if !ValidTableName(table) {
		return rep, Options{Table: table}.validate()
	}
	desc, err := describe(ctx, client, table)
	switch {
	case errors.Is(err, ErrTableMissing):
		_, err = client.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            &table,
			BillingMode:          types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}},
		})
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) { // another migrate made it meanwhile
			return rep, fmt.Errorf("dynamodbstore: create table %s: %w", table, err)
		}
		rep.Created = err == nil
		if desc, err = waitActive(ctx, client, table); err != nil {
			return rep, err
		}
	case err != nil:
		return rep, err
	}
	if err := checkShape(table, desc); err != nil {
		return rep, err
	}
	rep.TTL, rep.TTLWarning = enableTTL(ctx, client, table)
	return rep, nil
}

// Check checks that the store's table exists, is usable and has the
// store's key, and reads the server's clock on the way.
func (s *Store) Check(ctx context.Context) error {
	sent := s.clock.now()
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &s.table})
	s.heard(sent, metadata(out), err)
	if err != nil {
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			return fmt.Errorf("%w: %s (create it with `idem migrate --store dynamodb://%s`, or dynamodbstore.Migrate)", ErrTableMissing, s.table, s.table)
		}
		return fmt.Errorf("dynamodbstore: describe table %s: %w", s.table, err)
	}
	return checkShape(s.table, out.Table)
}

func describe(ctx context.Context, client *dynamodb.Client, table string) (*types.TableDescription, error) {
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("%w: %s", ErrTableMissing, table)
		}
		return nil, fmt.Errorf("dynamodbstore: describe table %s: %w", table, err)
	}
	return out.Table, nil
}

// waitActive polls the table until it is active (a new table is CREATING
// for seconds on AWS).
func waitActive(ctx context.Context, client *dynamodb.Client, table string) (*types.TableDescription, error) {
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		desc, err := describe(ctx, client, table)
		if err != nil && !errors.Is(err, ErrTableMissing) {
			return nil, err
		}
		if err == nil && desc.TableStatus == types.TableStatusActive {
			return desc, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dynamodbstore: table %s not active yet: %w", table, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// checkShape checks that the table's key is the store's: "pk", a string,
// as the only key.
func checkShape(table string, desc *types.TableDescription) error {
	if desc == nil {
		return fmt.Errorf("dynamodbstore: table %s: no description", table)
	}
	switch desc.TableStatus {
	case types.TableStatusDeleting, types.TableStatusArchiving, types.TableStatusArchived, types.TableStatusInaccessibleEncryptionCredentials:
		return fmt.Errorf("dynamodbstore: table %s is %s", table, desc.TableStatus)
	}
	ok := len(desc.KeySchema) == 1 && aws.ToString(desc.KeySchema[0].AttributeName) == attrPK && desc.KeySchema[0].KeyType == types.KeyTypeHash
	if ok {
		ok = false
		for _, a := range desc.AttributeDefinitions {
			if aws.ToString(a.AttributeName) == attrPK {
				ok = a.AttributeType == types.ScalarAttributeTypeS
			}
		}
	}
	if !ok {
		return fmt.Errorf("%w: %s must have the hash key %q of type string and no sort key; use a table of its own for idem", ErrTableShape, table, attrPK)
	}
	return nil
}

// enableTTL turns native TTL on for TTLAttribute, best effort.
func enableTTL(ctx context.Context, client *dynamodb.Client, table string) (string, error) {
	d, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &table})
	if err == nil && d.TimeToLiveDescription != nil {
		st, attr := d.TimeToLiveDescription.TimeToLiveStatus, aws.ToString(d.TimeToLiveDescription.AttributeName)
		switch {
		case (st == types.TimeToLiveStatusEnabled || st == types.TimeToLiveStatusEnabling) && attr == TTLAttribute:
			return "already enabled", nil
		case st == types.TimeToLiveStatusEnabled || st == types.TimeToLiveStatusEnabling:
			return "", fmt.Errorf("native TTL of table %s is on attribute %q, and a table has one; idem's items carry their expiry in %q: expired items stay until `idem cleanup` removes them", table, attr, TTLAttribute)
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: &table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "UnknownOperationException" {
			return "", fmt.Errorf("the server has no native TTL (UpdateTimeToLive: UnknownOperationException, as dynalite answers): expired items stay until `idem cleanup` removes them")
		}
		return "", fmt.Errorf("native TTL not enabled on %s: %w; expired items stay until `idem cleanup` removes them", table, err)
	}
	return "enabled", nil
}
