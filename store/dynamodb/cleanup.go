package dynamodbstore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// scanPage is how many items one Scan request reads before its filter.
const scanPage = 1000

// expiredScan returns a Scan of the items expired when the server's clock
// reads at least now, the lower bound of it when the scan starts.
func (s *Store) expiredScan(ctx context.Context) (*dynamodb.ScanInput, error) {
	if err := s.ensureClock(ctx, zeroKeyHash); err != nil {
		return nil, err
	}
	now, _, _ := s.clock.bounds(s.clock.now())
	return &dynamodb.ScanInput{
		TableName:                &s.table,
		FilterExpression:         aws.String("#until <= :now"),
		ProjectionExpression:     aws.String("#pk, #token, #ver"),
		ExpressionAttributeNames: map[string]string{"#until": attrUntil, "#pk": attrPK, "#token": attrToken, "#ver": attrVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": num(ms(now)),
		},
		ConsistentRead: aws.Bool(true),
		Limit:          aws.Int32(scanPage),
	}, nil
}

// zeroKeyHash names no record: ensureClock reads it when a process's first
// call is a Cleanup.
const zeroKeyHash = "0000000000000000000000000000000000000000000000000000000000000000"

// Cleanup implements store.Store: it scans the table for the items whose
// lifetime has ended on the server's clock and deletes each one with a
// DeleteItem conditional on the token and version it was read with, so
// that a record made again meanwhile stays.
//
// DynamoDB has no index by expiry: the scan reads every item, live or
// not, so its cost grows with the table, unlike the store contract's other
// stores. On AWS, let native TTL delete expired items (Migrate enables
// it) and turn the engine's background cleanup off
// (Policy.CleanupInterval: -1); see the package documentation.
func (s *Store) Cleanup(ctx context.Context, limit int) (int, error) {
	const op = "cleanup"
	if err := s.check(ctx, op); err != nil {
		return 0, err
	}
	in, err := s.expiredScan(ctx)
	if err != nil {
		return 0, s.wrap(ctx, op, s.table, err)
	}
	deleted := 0
	for {
		sent := s.clock.now()
		out, err := s.client.Scan(ctx, in)
		s.heard(sent, metadata(out), err)
		if err != nil {
			return deleted, s.wrap(ctx, op, s.table, err)
		}
		for _, m := range out.Items {
			if limit > 0 && deleted >= limit {
				return deleted, nil
			}
			pk, token, version := m[attrPK], m[attrToken], m[attrVersion]
			if pk == nil || token == nil || version == nil {
				continue // not a record of this store
			}
			_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName:                 &s.table,
				Key:                       map[string]types.AttributeValue{attrPK: pk},
				ConditionExpression:       aws.String("#token = :token AND #ver = :ver"),
				ExpressionAttributeNames:  map[string]string{"#token": attrToken, "#ver": attrVersion},
				ExpressionAttributeValues: map[string]types.AttributeValue{":token": token, ":ver": version},
			})
			switch {
			case err == nil:
				deleted++
				if v, ok := pk.(*types.AttributeValueMemberS); ok {
					s.watch.Forget(v.Value)
				}
			case conditionFailed(err):
				// Written again since the scan read it: it stays.
			default:
				return deleted, s.wrap(ctx, op, s.table, err)
			}
		}
		if len(out.LastEvaluatedKey) == 0 || (limit > 0 && deleted >= limit) {
			return deleted, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// CountExpired counts the records whose lifetime has ended on the
// server's clock, without deleting them (`idem cleanup --dry-run`). It
// scans the whole table, as Cleanup does.
func (s *Store) CountExpired(ctx context.Context) (int, error) {
	const op = "count expired"
	if err := s.check(ctx, op); err != nil {
		return 0, err
	}
	in, err := s.expiredScan(ctx)
	if err != nil {
		return 0, s.wrap(ctx, op, s.table, err)
	}
	in.ProjectionExpression = nil
	delete(in.ExpressionAttributeNames, "#pk")
	delete(in.ExpressionAttributeNames, "#token")
	delete(in.ExpressionAttributeNames, "#ver")
	in.Select = types.SelectCount
	n := 0
	for {
		sent := s.clock.now()
		out, err := s.client.Scan(ctx, in)
		s.heard(sent, metadata(out), err)
		if err != nil {
			return n, s.wrap(ctx, op, s.table, err)
		}
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
