package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Defaults of the gateway's basic settings.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultAdminListen     = "127.0.0.1:9090"
	DefaultStore           = "file:./idem-data"
	DefaultShutdownTimeout = 30 * time.Second
	DefaultUpstreamTimeout = 60 * time.Second
)

// Config is the gateway's configuration file. Pointer and zero fields mean
// "not set": Validate and Build fill in the defaults.
type Config struct {
	// Listen is the proxy's address.
	Listen string `yaml:"listen"`
	// Upstream is the URL of the API behind the gateway. Required.
	Upstream string `yaml:"upstream"`
	// UpstreamTimeout bounds the wait for the upstream's response headers.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	// Store is the store DSN: memory:, file:PATH, postgres://..., redis://...
	Store string `yaml:"store"`
	// Migrate runs the PostgreSQL migrations at start-up (default true).
	Migrate *bool `yaml:"migrate"`
	// AdminListen serves /healthz, /metrics and /keys; "off" disables it.
	AdminListen string `yaml:"admin_listen"`
	// AdminToken protects /keys (Authorization: Bearer TOKEN). Without it
	// /keys is disabled.
	AdminToken string `yaml:"admin_token"`
	// Tenant says where the caller's identity comes from.
	Tenant *Tenant `yaml:"tenant"`
	// Defaults is the policy of every route, and of the catch-all route
	// used when Routes is empty.
	Defaults Policy `yaml:"defaults"`
	// Routes are matched with Go ServeMux patterns; requests matching none
	// pass through unprotected. Empty means one route for every request.
	Routes []Route `yaml:"routes"`

	MaxRequestBytes  ByteSize   `yaml:"max_request_bytes"`
	MaxResponseBytes ByteSize   `yaml:"max_response_bytes"`
	KeepHeaders      StringList `yaml:"keep_headers"`
	RequestIDHeader  string     `yaml:"request_id_header"`
	// CleanupInterval throttles background cleanup; "off" disables it.
	CleanupInterval *Duration `yaml:"cleanup_interval"`
	// ShutdownTimeout bounds the wait for in-flight requests at shutdown.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`

	LogFormat string `yaml:"log_format"` // text (default) or json
	LogLevel  string `yaml:"log_level"`  // debug, info (default), warn, error

	// Secret seals records (see secret.go): one or more secrets, the first
	// protecting new records. SecretFile reads them from a file instead.
	Secret     StringList `yaml:"secret"`
	SecretFile string     `yaml:"secret_file"`
	// MaxHeaderBytes and ReadHeaderTimeout bound what a client may send
	// before its request is read (see secret.go for the defaults).
	MaxHeaderBytes    ByteSize `yaml:"max_header_bytes"`
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
}

// Tenant names the source of the caller's identity: a header set by an
// authenticating proxy, or a hash of the Authorization header.
type Tenant struct {
	Header        string `yaml:"header"`
	Authorization string `yaml:"authorization"` // "hash"
}

// Policy holds the per-route knobs; Defaults and every Route carry one.
type Policy struct {
	Profile       string       `yaml:"profile"` // ietf, stripe, mobile, workflow-admin
	TTL           *Duration    `yaml:"ttl"`
	Lease         *Duration    `yaml:"lease"`
	Wait          *Duration    `yaml:"wait"`
	OnFailure     string       `yaml:"on_failure"`     // release, cache, conflict
	OnStale       string       `yaml:"on_stale"`       // retry, conflict
	OnStoreError  string       `yaml:"on_store_error"` // fail_closed, fail_open
	CacheStatuses StringList   `yaml:"cache_statuses"` // "2xx, 409", "all"
	MaxKeyBytes   int          `yaml:"max_key_bytes"`
	Key           string       `yaml:"key"` // required, optional
	Fingerprint   *Fingerprint `yaml:"fingerprint"`
}

// Route is one entry of routes.
type Route struct {
	// Match is a Go ServeMux pattern: "POST /charges", "/api/{id}/save".
	Match  string `yaml:"match"`
	Policy `yaml:",inline"`
}

// Load reads and parses the file at path. It does not validate.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse parses a YAML document. Unknown fields are errors. It does not
// validate.
func Parse(b []byte) (*Config, error) {
	c := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	return c, nil
}

var notFound = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlError rewrites the YAML library's messages about unknown fields
// ("field lisen not found in type config.Config") into the user's terms.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = notFound.ReplaceAllString(m, `unknown field "$1"`)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Env names the environment variables that override the file.
var Env = map[string]func(c *Config, v string){
	"IDEM_LISTEN":       func(c *Config, v string) { c.Listen = v },
	"IDEM_UPSTREAM":     func(c *Config, v string) { c.Upstream = v },
	"IDEM_STORE":        func(c *Config, v string) { c.Store = v },
	"IDEM_ADMIN_LISTEN": func(c *Config, v string) { c.AdminListen = v },
	"IDEM_ADMIN_TOKEN":  func(c *Config, v string) { c.AdminToken = v },
	"IDEM_LOG_FORMAT":   func(c *Config, v string) { c.LogFormat = v },
	"IDEM_LOG_LEVEL":    func(c *Config, v string) { c.LogLevel = v },
	"IDEM_SECRET":       func(c *Config, v string) { c.Secret, c.SecretFile = StringList{v}, "" },
	"IDEM_SECRET_FILE":  func(c *Config, v string) { c.SecretFile, c.Secret = v, nil },
}

// ApplyEnv overrides the basic settings with the IDEM_* variables that
// getenv returns non-empty (IDEM_CONFIG, the file's path, is read by the
// command).
func (c *Config) ApplyEnv(getenv func(string) string) {
	for name, set := range Env {
		if v := getenv(name); v != "" {
			set(c, v)
		}
	}
}

// WithDefaults fills in the basic settings that are not set.
func (c *Config) WithDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.AdminListen == "" {
		c.AdminListen = DefaultAdminListen
	}
	if c.Store == "" {
		c.Store = DefaultStore
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = Duration(DefaultShutdownTimeout)
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = Duration(DefaultUpstreamTimeout)
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
}

// AdminEnabled reports whether the admin listener runs.
func (c *Config) AdminEnabled() bool {
	switch strings.ToLower(c.AdminListen) {
	case "off", "none", "disabled", "false":
		return false
	}
	return true
}

// MigrateEnabled reports whether a PostgreSQL store is migrated at start-up.
func (c *Config) MigrateEnabled() bool { return c.Migrate == nil || *c.Migrate }

// UpstreamURL returns the parsed upstream.
func (c *Config) UpstreamURL() (*url.URL, error) {
	if c.Upstream == "" {
		return nil, errors.New("upstream is required: set upstream in the config file, --upstream or IDEM_UPSTREAM")
	}
	u, err := url.Parse(c.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %v", c.Upstream, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %q: want an http:// or https:// URL with a host", c.Upstream)
	}
	return u, nil
}

// Validate applies WithDefaults and reports every invalid setting, joined.
// Store DSNs are checked by the command that opens them.
func (c *Config) Validate() error {
	c.WithDefaults()
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if _, err := c.UpstreamURL(); err != nil {
		errs = append(errs, err)
	}
	if err := checkAddr(c.Listen); err != nil {
		add("listen: %v", err)
	}
	if c.AdminEnabled() {
		if err := checkAddr(c.AdminListen); err != nil {
			add("admin_listen: %v", err)
		}
	}
	if c.Tenant != nil {
		t := c.Tenant
		switch {
		case t.Header != "" && t.Authorization != "":
			add("tenant: set header or authorization, not both")
		case t.Header == "" && t.Authorization == "":
			add("tenant: set header (e.g. X-User-ID) or authorization: hash")
		case t.Authorization != "" && t.Authorization != "hash":
			add("tenant.authorization %q: the only supported value is hash", t.Authorization)
		case t.Header != "" && !validHeaderName(t.Header):
			add("tenant.header %q is not a valid header name", t.Header)
		}
	}
	for _, h := range c.KeepHeaders {
		if !validHeaderName(h) {
			add("keep_headers: %q is not a valid header name", h)
		}
	}
	if c.RequestIDHeader != "" && !validHeaderName(c.RequestIDHeader) {
		add("request_id_header: %q is not a valid header name", c.RequestIDHeader)
	}
	if c.MaxRequestBytes < 0 || c.MaxResponseBytes < 0 {
		add("max_request_bytes and max_response_bytes must not be negative")
	}
	if c.CleanupInterval != nil && *c.CleanupInterval < 0 && *c.CleanupInterval != -1 {
		add("cleanup_interval: negative; write off to disable background cleanup")
	}
	if c.ShutdownTimeout < 0 {
		add("shutdown_timeout: negative")
	}
	if c.UpstreamTimeout < 0 {
		add("upstream_timeout: negative")
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		add("log_format %q: want text or json", c.LogFormat)
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.Build(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateHardening()...)
	return errors.Join(errs...)
}

func checkAddr(a string) error {
	if _, _, err := net.SplitHostPort(a); err != nil {
		return fmt.Errorf("%q is not host:port (%v)", a, err)
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return http.CanonicalHeaderKey(s) != ""
}
