package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idem-dev/idem/idemhttp"
)

// Defaults of the gateway's basic settings.
const (
	DefaultListen           = "127.0.0.1:8080"
	DefaultAdminListen      = "127.0.0.1:9090"
	DefaultStore            = "file:./idem-data"
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultUpstreamTimeout  = 60 * time.Second
	DefaultUpstreamDeadline = 5 * time.Minute
	// DefaultMaxKeysPerTenant and DefaultMaxBytesPerTenant bound what one
	// tenant's live records hold (responses plus 1 KiB a record): 1 GiB,
	// about twice that in the file store's log before compaction, so that
	// one caller cannot fill the disk under the default store and deny
	// every tenant new keys; the record cap bounds what a tenant costs
	// the file store's index in memory. docs/ISOLATION.md says how they
	// were sized.
	DefaultMaxKeysPerTenant  = 1_000_000
	DefaultMaxBytesPerTenant = 1 << 30
	// DefaultMaxKeysAnonymous bounds the anonymous scope that anonymous:
	// shared opts into, which every caller without credentials shares.
	DefaultMaxKeysAnonymous = 10_000
)

// The values of anonymous:.
const (
	AnonymousRefuse = "refuse"
	AnonymousShared = "shared"
)

// Config is the gateway's configuration file. Pointer and zero fields mean
// "not set": Validate and Build fill in the defaults.
type Config struct {
	// Listen is the proxy's address.
	Listen string `yaml:"listen"`
	// Upstream is the URL of the API behind the gateway. Required.
	Upstream string `yaml:"upstream"`
	// UpstreamTimeout bounds a client's wait for the first execution of a
	// keyed request (Route.AnswerWithin): past it the client gets 504 and
	// the upstream call goes on in the background, its outcome recorded
	// and replayed to retries. A route may set its own.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	// UpstreamDeadline bounds an upstream call itself (the transport); a
	// call cut off by it has an unknown outcome. Default 5m.
	UpstreamDeadline Duration `yaml:"upstream_deadline"`
	// Store is the store DSN: memory:, file:PATH, postgres://..., redis://...
	Store string `yaml:"store"`
	// Migrate runs the PostgreSQL migrations at start-up (default true).
	Migrate *bool `yaml:"migrate"`
	// AdminListen serves /healthz, /metrics and /keys; "off" disables it.
	AdminListen string `yaml:"admin_listen"`
	// AdminToken protects /keys (Authorization: Bearer TOKEN). Without it
	// /keys is disabled. At least MinAdminTokenBytes, and no placeholder of
	// the examples (change-me...): Validate refuses others.
	AdminToken string `yaml:"admin_token"`
	// Tenant says where the caller's identity comes from.
	Tenant *Tenant `yaml:"tenant"`
	// Anonymous says what the default tenant (no tenant) does with a keyed
	// request that carries no credential: refuse (401, the default) or
	// shared (one anonymous scope shared by every such request).
	Anonymous string `yaml:"anonymous"`
	// Defaults is the policy of every route, and of the catch-all route
	// used when Routes is empty.
	Defaults Policy `yaml:"defaults"`
	// Routes are matched with Go ServeMux patterns; requests matching none
	// pass through unprotected. Empty means one route for every request.
	Routes []Route `yaml:"routes"`

	// MaxKeysPerTenant bounds the live records one tenant may create
	// through this gateway (counted by this process, each until its TTL
	// ends); past it a new key gets 429 too_many_keys. Default
	// DefaultMaxKeysPerTenant; 0 turns it off. MaxKeysAnonymous is the
	// same for the anonymous scope that anonymous: shared opts into,
	// shared by every caller without credentials (default
	// DefaultMaxKeysAnonymous; 0 turns it off). MaxBytesPerTenant
	// bounds the bytes those records hold (default
	// DefaultMaxBytesPerTenant; 0 turns it off).
	MaxKeysPerTenant  *Count    `yaml:"max_keys_per_tenant"`
	MaxKeysAnonymous  *Count    `yaml:"max_keys_anonymous"`
	MaxBytesPerTenant *ByteSize `yaml:"max_bytes_per_tenant"`

	MaxRequestBytes ByteSize `yaml:"max_request_bytes"`
	// BodyReadTimeout bounds the read of a keyed request's body, which is
	// read before anything is reserved; a client that stalls gets 408 and
	// its connection is closed. Default 30s; off disables it.
	BodyReadTimeout  Duration `yaml:"body_read_timeout"`
	MaxResponseBytes ByteSize `yaml:"max_response_bytes"`
	// ReplayHeaders are the response headers a replay repeats besides
	// idemhttp's defaults (idemhttp.Options.ReplayHeaders).
	ReplayHeaders StringList `yaml:"replay_headers"`
	// KeepHeaders is replay_headers' former name, still read: Renamed
	// reports it, for a warning at start; a file giving both is refused.
	KeepHeaders StringList `yaml:"keep_headers"`
	// AllowCredentialHeaders lets replay_headers name Set-Cookie,
	// Authorization or Proxy-Authorization, which replays then hand to
	// anyone holding the key. Refused without it.
	AllowCredentialHeaders bool   `yaml:"allow_credential_headers"`
	RequestIDHeader        string `yaml:"request_id_header"`
	// CleanupInterval throttles background cleanup; "off" disables it.
	CleanupInterval *Duration `yaml:"cleanup_interval"`
	// ShutdownTimeout bounds the wait for in-flight requests at shutdown.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// LegacyReads: a first call whose scope holds ':' or '%' also looks
	// for its record where versions before framed identities kept it
	// (idem.WithLegacyReads). Defaults to true, but for a store that can
	// hold no record of those versions (dsn.Opened.FramedOnly: a memory
	// store, a file or pebble directory this version created); set it
	// false once one TTL has passed since the last earlier gateway stopped.
	LegacyReads *bool `yaml:"legacy_reads"`

	Operations `yaml:",inline"`

	LogFormat string `yaml:"log_format"` // text (default) or json
	LogLevel  string `yaml:"log_level"`  // debug, info (default), warn, error
	// LogRawKeys lets debug lines carry raw scopes (tenants) and
	// idempotency keys besides their hashes; lines at info and above
	// never do. It needs log_level: debug.
	LogRawKeys bool `yaml:"log_raw_keys"`

	// Secret seals records (see secret.go): one or more secrets, the first
	// protecting new records. SecretFile reads them from a file instead.
	Secret     StringList `yaml:"secret"`
	SecretFile string     `yaml:"secret_file"`
	// MaxHeaderBytes and ReadHeaderTimeout bound what a client may send
	// before its request is read (see secret.go for the defaults).
	MaxHeaderBytes    ByteSize `yaml:"max_header_bytes"`
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
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
	OnUnknown     string       `yaml:"on_unknown"`     // conflict, release
	CacheStatuses StringList   `yaml:"cache_statuses"` // "2xx, 409", "all"
	MaxKeyBytes   Count        `yaml:"max_key_bytes"`
	Key           string       `yaml:"key"` // required, optional
	Fingerprint   *Fingerprint `yaml:"fingerprint"`
	// ErrorTexts rewords idem's own answers in an application's error
	// envelope ({"success":false,"error":{"code","message"}}), by kind
	// (in_progress, payload_mismatch, ...): over the mobile profile's
	// preset texts, or, for another profile, in place of problem+json.
	ErrorTexts map[string]ErrorText `yaml:"error_texts"`
}

// ErrorText is the code and message of one kind of answer.
type ErrorText struct {
	Code    string `yaml:"code"`
	Message string `yaml:"message"`
}

// Route is one entry of routes.
type Route struct {
	// Match is a Go ServeMux pattern: "POST /charges", "/api/{id}/save".
	// The method, when given, is upper-case and one that changes
	// something; a host part is refused (see checkPattern).
	Match  string `yaml:"match"`
	Policy `yaml:",inline"`
	// UpstreamTimeout overrides the top-level upstream_timeout.
	UpstreamTimeout *Duration `yaml:"upstream_timeout"`
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
		return nil, yamlError(err, b)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	return c, nil
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
	"IDEM_DRAIN_DELAY": func(c *Config, v string) {
		d, err := ParseDuration(v)
		if err != nil {
			c.envErrs = append(c.envErrs, fmt.Errorf("IDEM_DRAIN_DELAY: %v", err))
			return
		}
		c.DrainDelay = Duration(d)
	},
	"IDEM_UPSTREAM_READY": func(c *Config, v string) { c.UpstreamReady = v },
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
	if c.UpstreamDeadline == 0 {
		c.UpstreamDeadline = Duration(max(DefaultUpstreamDeadline, time.Duration(c.UpstreamTimeout)))
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
}

// replayHeaders returns replay_headers, or keep_headers, its former name.
func (c *Config) replayHeaders() StringList {
	if c.ReplayHeaders != nil {
		return c.ReplayHeaders
	}
	return c.KeepHeaders
}

// Renamed returns a warning for each setting given under a former name
// that is still read.
func (c *Config) Renamed() []string {
	if c.KeepHeaders != nil {
		return []string{"keep_headers is now replay_headers; rename it in the config file"}
	}
	return nil
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

// LegacyReadsEnabled reports whether records written before identities
// framed the scope are still looked for (legacy_reads) in a store;
// framedOnly says the store can hold none (dsn.Opened.FramedOnly), and
// turns them off unless legacy_reads says otherwise.
func (c *Config) LegacyReadsEnabled(framedOnly bool) bool {
	if c.LegacyReads != nil {
		return *c.LegacyReads
	}
	return !framedOnly
}

// UpstreamURL returns the parsed upstream.
func (c *Config) UpstreamURL() (*url.URL, error) {
	if c.Upstream == "" {
		return nil, errors.New("upstream is required: set upstream in the config file, --upstream or IDEM_UPSTREAM")
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || u.Scheme == "" || u.Opaque != "" || (u.Host == "" && u.Scheme != "http" && u.Scheme != "https") {
		// "127.0.0.1:3000" does not parse ("first path segment in URL
		// cannot contain colon") and "localhost:3000" parses as a scheme:
		// both lack the scheme.
		if !strings.Contains(c.Upstream, "://") {
			return nil, fmt.Errorf("upstream %q is not a URL: add the scheme, e.g. http://%s", c.Upstream, c.Upstream)
		}
		if err != nil {
			return nil, fmt.Errorf("upstream %q is not a URL: %v", c.Upstream, errors.Unwrap(err))
		}
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

	errs = append(errs, c.envErrs...)
	if _, err := c.UpstreamURL(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Operations.validate())
	if err := checkAddr(c.Listen); err != nil {
		add("listen: %v", err)
	}
	if c.AdminEnabled() {
		if err := checkAddr(c.AdminListen); err != nil {
			add("admin_listen: %v", err)
		}
	}
	if c.AdminToken != "" {
		if err := checkAdminToken(c.AdminToken); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Tenant != nil {
		errs = append(errs, c.Tenant.validate())
	}
	switch {
	case c.Anonymous != "" && c.Anonymous != AnonymousRefuse && c.Anonymous != AnonymousShared:
		add("anonymous %q: want refuse (401 for a keyed request without credentials, the default) or shared (one scope for all of them)", c.Anonymous)
	case c.Anonymous == AnonymousShared && c.Tenant != nil:
		add("anonymous: shared applies to the default tenant only: with tenant: none every caller shares already, and a request without a tenant source gets 401; remove one of them")
	}
	replayKey := "replay_headers"
	if c.KeepHeaders != nil {
		replayKey = "keep_headers"
		if c.ReplayHeaders != nil {
			add("keep_headers and replay_headers are both set: keep_headers is replay_headers' former name; remove keep_headers")
		}
	}
	for _, h := range c.replayHeaders() {
		if !validHeaderName(h) {
			add("%s: %q is not a valid header name", replayKey, h)
		}
		for _, cred := range idemhttp.CredentialHeaders() {
			if http.CanonicalHeaderKey(h) == cred && !c.AllowCredentialHeaders {
				add("%s: %s is a credential header: every retry with the key would receive the first caller's; set allow_credential_headers: true to force it", replayKey, cred)
			}
		}
	}
	if c.RequestIDHeader != "" && !validHeaderName(c.RequestIDHeader) {
		add("request_id_header: %q is not a valid header name", c.RequestIDHeader)
	}
	for name, v := range map[string]int64{"max_keys_per_tenant": c.maxKeys(c.MaxKeysPerTenant), "max_keys_anonymous": c.maxKeys(c.MaxKeysAnonymous), "max_bytes_per_tenant": c.maxBytesPerTenant()} {
		if v < 0 {
			add("%s: negative; write 0 to turn the bound off", name)
		}
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
	if c.BodyReadTimeout < 0 && c.BodyReadTimeout != -1 {
		add("body_read_timeout: negative; write off to disable it")
	}
	if c.UpstreamDeadline < c.UpstreamTimeout {
		add("upstream_deadline (%s) is shorter than upstream_timeout (%s)", time.Duration(c.UpstreamDeadline), time.Duration(c.UpstreamTimeout))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		add("log_format %q: want text or json", c.LogFormat)
	}
	if lvl, err := ParseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	} else if c.LogRawKeys && lvl > slog.LevelDebug {
		add("log_raw_keys: only debug lines carry raw keys, and log_level is %s: set log_level: debug, or remove log_raw_keys", c.LogLevel)
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

func validHeaderName(s string) bool { return idemhttp.ValidHeaderName(s) }

// maxKeys is a per-tenant key bound as the middleware takes it: the
// default when not set.
func (c *Config) maxKeys(v *Count) int64 {
	if v == nil {
		return DefaultMaxKeysPerTenant
	}
	return int64(*v)
}

// maxBytesPerTenant is MaxBytesPerTenant, or its default.
func (c *Config) maxBytesPerTenant() int64 {
	if c.MaxBytesPerTenant == nil {
		return DefaultMaxBytesPerTenant
	}
	return int64(*c.MaxBytesPerTenant)
}
