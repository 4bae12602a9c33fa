package config

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/gateway"
)

// Tenant says where the caller's identity comes from:
//
//	tenant: none                          # every caller shares every key, on purpose
//	tenant: { header: X-User-ID }         # a header set by an authenticating proxy
//	tenant: { authorization: hash }       # a hash of Authorization
//	tenant: { cookie: session }           # a hash of the session cookie's value
//	tenant: [ { authorization: hash }, { header: Stripe-Account, optional: true } ]   # a hash of both
//
// Without tenant, keys are scoped by a hash of every credential the request
// carries (idemhttp.CallerCredentialHeaders and the TLS client
// certificate); a keyed request with none gets 401, unless anonymous:
// shared. A keyed request without a required source gets 401.
type Tenant struct {
	None    bool
	Sources []TenantSource
}

// TenantSource is one source of a tenant.
type TenantSource struct {
	Header        string `yaml:"header"`
	Authorization string `yaml:"authorization"` // "hash"
	Cookie        string `yaml:"cookie"`
	Optional      bool   `yaml:"optional"`
}

const tenantForms = "none, {header: NAME}, {authorization: hash}, {cookie: NAME} or a list of them"

// UnmarshalYAML implements yaml.Unmarshaler.
func (t *Tenant) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value != "none" {
			return fmt.Errorf("line %d: tenant %q: want %s", n.Line, n.Value, tenantForms)
		}
		*t = Tenant{None: true}
		return nil
	case yaml.MappingNode:
		var s TenantSource
		if err := n.Decode(&s); err != nil {
			return err
		}
		*t = Tenant{Sources: []TenantSource{s}}
		return nil
	case yaml.SequenceNode:
		*t = Tenant{}
		for _, c := range n.Content {
			if c.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: tenant: a list holds {header: NAME}, {authorization: hash} or {cookie: NAME}", c.Line)
			}
			var s TenantSource
			if err := c.Decode(&s); err != nil {
				return err
			}
			t.Sources = append(t.Sources, s)
		}
		return nil
	}
	return fmt.Errorf("line %d: tenant: want %s", n.Line, tenantForms)
}

func (t *Tenant) validate() error {
	if t.None {
		return nil
	}
	if len(t.Sources) == 0 {
		return errors.New("tenant: set header (e.g. X-User-ID), authorization: hash, cookie (e.g. session), a list of them, or none")
	}
	var errs []error
	required := false
	for _, s := range t.Sources {
		set := 0
		for _, v := range []string{s.Header, s.Authorization, s.Cookie} {
			if v != "" {
				set++
			}
		}
		required = required || !s.Optional
		switch {
		case set > 1:
			errs = append(errs, errors.New("tenant: set one of header, authorization and cookie in one entry (a list combines them)"))
		case set == 0:
			errs = append(errs, errors.New("tenant: set header (e.g. X-User-ID), authorization: hash or cookie (e.g. session)"))
		case s.Authorization != "" && s.Authorization != "hash":
			errs = append(errs, fmt.Errorf("tenant.authorization %q: the only supported value is hash", s.Authorization))
		case s.Header != "" && !validHeaderName(s.Header):
			errs = append(errs, fmt.Errorf("tenant.header %q is not a valid header name", s.Header))
		case s.Cookie != "" && !validHeaderName(s.Cookie):
			errs = append(errs, fmt.Errorf("tenant.cookie %q is not a valid cookie name", s.Cookie))
		}
	}
	if !required {
		errs = append(errs, errors.New("tenant: every source is optional: a request with none of them would share one scope with every other; make one required (drop its optional: true)"))
	}
	return errors.Join(errs...)
}

// build returns the tenant function (nil: the middleware's default) and a
// description of it for the start-up log: the choice itself is the
// gateway's (gateway.Tenant). nil t is the default: a hash of every
// credential.
func (t *Tenant) build(sharedAnonymous bool) (idemhttp.TenantFunc, string, error) {
	if t == nil {
		return gateway.Tenant(false, nil, sharedAnonymous)
	}
	sources := make([]gateway.TenantSource, len(t.Sources))
	for i, s := range t.Sources {
		sources[i] = gateway.TenantSource{Header: s.Header, Authorization: s.Authorization != "", Cookie: s.Cookie, Optional: s.Optional}
	}
	return gateway.Tenant(t.None, sources, false)
}
