package s3store

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Config is what an s3:// DSN says: where the records live, and how to
// reach the server. Credentials never ride on the DSN; they come from the
// SDK's usual chain (environment, shared files, instance roles).
type Config struct {
	// Options are the store's bucket and prefix.
	Options
	// Endpoint is the server's URL for S3-compatible servers (versitygw,
	// MinIO, R2...); "" means AWS.
	Endpoint string
	// Region is the signing region; "" leaves the SDK's (AWS_REGION...),
	// or us-east-1 when an endpoint is given.
	Region string
	// PathStyle addresses buckets as endpoint/bucket rather than
	// bucket.endpoint; the default is true when an endpoint is given, as
	// most S3-compatible servers need.
	PathStyle bool
}

// ParseDSN parses s3://BUCKET[/PREFIX][?endpoint=URL&region=R&path_style=BOOL],
// the DSN of the gateway's store option:
//
//	s3://idem-records                                  AWS, prefix ""
//	s3://shared/billing?region=eu-west-1               AWS, prefix billing/
//	s3://idem/app?endpoint=http://127.0.0.1:7070       versitygw, MinIO...
func ParseDSN(dsn string) (Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return Config{}, fmt.Errorf("s3store: dsn: %w", err)
	}
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("s3store: dsn %q: scheme is not s3", dsn)
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("s3store: dsn %q: credentials do not belong in the DSN; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or another source the SDK reads", u.Redacted())
	}
	c := Config{Options: Options{Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/")}}
	q := u.Query()
	pathStyle := ""
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return Config{}, fmt.Errorf("s3store: dsn %q: endpoint %q is not an http(s) URL", dsn, v)
			}
			c.Endpoint = v
		case "region":
			c.Region = v
		case "path_style":
			pathStyle = v
		default:
			return Config{}, fmt.Errorf("s3store: dsn %q: unknown parameter %q (want endpoint, region, path_style)", dsn, k)
		}
	}
	c.PathStyle = c.Endpoint != ""
	if pathStyle != "" {
		if c.PathStyle, err = strconv.ParseBool(pathStyle); err != nil {
			return Config{}, fmt.Errorf("s3store: dsn %q: path_style: %w", dsn, err)
		}
	}
	if c.Region == "" && c.Endpoint != "" {
		c.Region = "us-east-1" // what S3-compatible servers expect unless told
	}
	c.Options = c.Options.WithDefaults()
	if err := c.Options.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ClientOptions applies the DSN's endpoint, region and addressing to an
// s3.Client's options:
//
//	awsCfg, err := config.LoadDefaultConfig(ctx)
//	client := s3.NewFromConfig(awsCfg, c.ClientOptions)
//	st, err := s3store.New(client, c.Options)
func (c Config) ClientOptions(o *s3.Options) {
	if c.Endpoint != "" {
		o.BaseEndpoint = aws.String(c.Endpoint)
	}
	if c.Region != "" {
		o.Region = c.Region
	}
	o.UsePathStyle = c.PathStyle
}
