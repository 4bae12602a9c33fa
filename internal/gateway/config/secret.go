package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/idem-dev/idem/seal"
)

// Defaults of the hostile-client limits of the proxy's HTTP server.
const (
	// DefaultMaxHeaderBytes bounds a request's header block: ample for
	// bearer tokens and cookies, small enough that slow or bloated headers
	// cannot hold much memory per connection. Larger requests get 431.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultReadHeaderTimeout is how long a connection may take to send its
	// request headers; a client that trickles them is cut off after it.
	DefaultReadHeaderTimeout = 10 * time.Second
)

// HeaderLimit is max_header_bytes, or its default.
func (c *Config) HeaderLimit() int {
	if c.MaxHeaderBytes == 0 {
		return DefaultMaxHeaderBytes
	}
	return int(c.MaxHeaderBytes)
}

// HeaderTimeout is read_header_timeout, or its default.
func (c *Config) HeaderTimeout() time.Duration {
	if c.ReadHeaderTimeout == 0 {
		return DefaultReadHeaderTimeout
	}
	return time.Duration(c.ReadHeaderTimeout)
}

// HasSecret reports whether a secret is configured (secret, secret_file,
// IDEM_SECRET or IDEM_SECRET_FILE).
func (c *Config) HasSecret() bool { return len(c.Secret) > 0 || c.SecretFile != "" }

// Keyring returns the keyring of the configured secrets, or nil when none
// is configured. Errors never quote a secret.
func (c *Config) Keyring() (*seal.Keyring, error) {
	switch {
	case len(c.Secret) > 0 && c.SecretFile != "":
		return nil, errors.New("secret and secret_file: set one, not both")
	case c.SecretFile != "":
		b, err := os.ReadFile(c.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("secret_file: %w", err)
		}
		k, err := seal.ParseKeyring(string(b))
		if err != nil {
			return nil, fmt.Errorf("secret_file %s: %w", c.SecretFile, err)
		}
		return k, nil
	case len(c.Secret) > 0:
		k, err := seal.ParseKeyring(strings.Join(c.Secret, ","))
		if err != nil {
			return nil, fmt.Errorf("secret (or IDEM_SECRET): %w", err)
		}
		return k, nil
	}
	return nil, nil
}

func (c *Config) validateHardening() []error {
	var errs []error
	if _, err := c.Keyring(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxHeaderBytes < 0 || (c.MaxHeaderBytes > 0 && c.MaxHeaderBytes < 1024) {
		errs = append(errs, fmt.Errorf("max_header_bytes %d: want at least 1KiB (default %d)", c.MaxHeaderBytes, DefaultMaxHeaderBytes))
	}
	if c.ReadHeaderTimeout < 0 {
		errs = append(errs, errors.New("read_header_timeout: negative"))
	}
	return errs
}
