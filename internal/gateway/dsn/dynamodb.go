package dsn

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
)

// DynamoDB is a DynamoDB table: dynamodb://TABLE?region=R&endpoint=URL.
const DynamoDB = "dynamodb"

// DynamoDBConfig is what a dynamodb:// DSN says. Credentials never ride on
// the DSN; they come from the AWS SDK's usual chain (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, shared files, roles).
type DynamoDBConfig struct {
	// Table holds the records.
	Table string
	// Region is the signing region; "" leaves the SDK's (AWS_REGION...),
	// or us-east-1 when an endpoint is given.
	Region string
	// Endpoint is the server's URL for DynamoDB-compatible servers
	// (dynalite); "" means AWS.
	Endpoint string
}

// ParseDynamoDB parses dynamodb://TABLE[?region=R][&endpoint=URL], and
// refuses anything else: a path, a port, credentials, a parameter it does
// not know or one given twice.
//
//	dynamodb://idem?region=eu-west-1                       AWS
//	dynamodb://idem?endpoint=http://127.0.0.1:8000         dynalite
func ParseDynamoDB(dsn string) (DynamoDBConfig, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: %v", err)
	}
	switch {
	case !strings.EqualFold(u.Scheme, DynamoDB):
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: scheme %q is not dynamodb", u.Scheme)
	case u.Opaque != "":
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: write dynamodb://TABLE, with two slashes")
	case u.User != nil:
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: credentials do not belong in the DSN; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or another source the AWS SDK reads")
	case u.Port() != "" || (u.Path != "" && u.Path != "/"):
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: the DSN names a table, not a server: write dynamodb://TABLE?endpoint=http://HOST:PORT")
	case u.Fragment != "" || strings.Contains(dsn, "#"):
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: unexpected fragment")
	}
	c := DynamoDBConfig{Table: u.Host}
	if !dynamodbstore.ValidTableName(c.Table) {
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: table %q: want 3 to 255 letters, digits, '_', '-' or '.'", c.Table)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return DynamoDBConfig{}, fmt.Errorf("dynamodb: %v", err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return DynamoDBConfig{}, fmt.Errorf("dynamodb: parameter %s given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "region":
			if !validRegion(v) {
				return DynamoDBConfig{}, fmt.Errorf("dynamodb: region %q: want a region name such as eu-west-1", v)
			}
			c.Region = v
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil ||
				(e.Path != "" && e.Path != "/") || e.RawQuery != "" || e.Fragment != "" {
				return DynamoDBConfig{}, fmt.Errorf("dynamodb: endpoint %q: want http(s)://HOST[:PORT]", v)
			}
			c.Endpoint = strings.TrimSuffix(v, "/")
		default:
			return DynamoDBConfig{}, fmt.Errorf("dynamodb: unknown parameter %q (want region, endpoint)", k)
		}
	}
	if c.Region == "" && c.Endpoint != "" {
		c.Region = "us-east-1" // what compatible servers expect unless told
	}
	return c, nil
}

func validRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// client returns a DynamoDB client for c, its credentials and, unless the
// DSN says, its region from the SDK's chain, and the function that closes
// its idle connections.
//
// Its transport is the SDK's default with 64 idle connections kept rather
// than 10: every request of a gateway is one or two DynamoDB calls, and
// connections past the idle limit are closed after each call and left in
// TIME_WAIT.
func (c DynamoDBConfig) client(ctx context.Context) (*dynamodb.Client, func(), error) {
	var loadOpts []func(*awsconfig.LoadOptions) error
	if c.Region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(c.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, nil, err
	}
	if awsCfg.Region == "" {
		return nil, nil, fmt.Errorf("no AWS region: add ?region=REGION to the DSN or set AWS_REGION")
	}
	// The SDK's client, as configured (a custom CA bundle included),
	// made into one whose transport is ours to close.
	bc, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		bc = awshttp.NewBuildableClient()
	}
	tr := bc.GetTransport()
	tr.MaxIdleConnsPerHost = 64
	awsCfg.HTTPClient = &http.Client{Transport: tr}
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = &c.Endpoint
		}
	}), tr.CloseIdleConnections, nil
}

// openDynamoDB opens a DynamoDB store. With opts.Migrate it creates the
// table when it is missing (and turns native TTL on, best effort), as the
// PostgreSQL store's schema is migrated at start; it then checks that the
// table answers and has the store's key.
func openDynamoDB(ctx context.Context, d DSN, opts Options) (*Opened, error) {
	c, err := ParseDynamoDB(d.URL)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	client, closeIdle, err := c.client(ctx)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	if opts.Migrate {
		rep, err := dynamodbstore.Migrate(ctx, client, c.Table)
		if err != nil {
			closeIdle()
			return nil, fmt.Errorf("store %s: migrate: %w", d, err)
		}
		if rep.Created {
			opts.Logger.Info("idem: created the DynamoDB table", "table", c.Table)
		}
		if rep.TTLWarning != nil {
			opts.Logger.Warn("idem: DynamoDB native TTL is off; expiry does not need it", "table", c.Table, "reason", rep.TTLWarning.Error())
		}
	}
	st, err := dynamodbstore.New(client, dynamodbstore.Options{Table: c.Table})
	if err != nil {
		closeIdle()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	if err := st.Check(ctx); err != nil {
		closeIdle()
		return nil, fmt.Errorf("store %s: %w", d, err)
	}
	return &Opened{Store: st, DSN: d, closers: []func(){closeIdle}}, nil
}

// MigrateDynamoDB creates the table of the DynamoDB store dsn names when
// it does not exist, and turns its native TTL on, best effort (see
// dynamodbstore.Migrate).
func MigrateDynamoDB(ctx context.Context, dsn string) (dynamodbstore.MigrateReport, error) {
	rep, err := migrateDynamoDB(ctx, dsn)
	return rep, NewRedactor(dsn).Error(err)
}

func migrateDynamoDB(ctx context.Context, dsn string) (dynamodbstore.MigrateReport, error) {
	d, err := Parse(dsn)
	if err != nil {
		return dynamodbstore.MigrateReport{}, err
	}
	if d.Kind != DynamoDB {
		return dynamodbstore.MigrateReport{}, fmt.Errorf("store %s: not a DynamoDB store", d)
	}
	c, err := ParseDynamoDB(d.URL)
	if err != nil {
		return dynamodbstore.MigrateReport{}, fmt.Errorf("store %s: %w", d, err)
	}
	client, closeIdle, err := c.client(ctx)
	if err != nil {
		return dynamodbstore.MigrateReport{}, fmt.Errorf("store %s: %w", d, err)
	}
	defer closeIdle()
	rep, err := dynamodbstore.Migrate(ctx, client, c.Table)
	if err != nil {
		return rep, fmt.Errorf("store %s: %w", d, err)
	}
	return rep, nil
}
