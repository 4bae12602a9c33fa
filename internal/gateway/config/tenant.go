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
//	tenant: { authorization: hash }       # a keyed hash of Authorization
//	tenant: [ { authorization: hash }, { header: Stripe-Account } ]   # a hash of both
//
// Without tenant, keys are scoped by a keyed hash of the caller's
// Authorization header (absent: the anonymous scope).
type Tenant struct {
	None    bool
	Sources []TenantSource
}

// TenantSource is one source of a tenant.
type TenantSource struct {
	Header        string `yaml:"header"`
	Authorization string `yaml:"authorization"` // "hash"
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (t *Tenant) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value != "none" {
			return fmt.Errorf("line %d: tenant %q: want none, {header: NAME}, {authorization: hash} or a list of them", n.Line, n.Value)
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
				return fmt.Errorf("line %d: tenant: a list holds {header: NAME} or {authorization: hash}", c.Line)
			}
			var s TenantSource
			if err := c.Decode(&s); err != nil {
				return err
			}
			t.Sources = append(t.Sources, s)
		}
		return nil
	}
	return fmt.Errorf("line %d: tenant: want none, {header: NAME}, {authorization: hash} or a list of them", n.Line)
}

func (t *Tenant) validate() error {
	if t.None {
		return nil
	}
	if len(t.Sources) == 0 {
		return errors.New("tenant: set header (e.g. X-User-ID), authorization: hash, a list of them, or none")
	}
	var errs []error
	for _, s := range t.Sources {
		switch {
		case s.Header != "" && s.Authorization != "":
			errs = append(errs, errors.New("tenant: set header or authorization, not both, in one entry (a list combines them)"))
		case s.Header == "" && s.Authorization == "":
			errs = append(errs, errors.New("tenant: set header (e.g. X-User-ID) or authorization: hash"))
		case s.Authorization != "" && s.Authorization != "hash":
			errs = append(errs, fmt.Errorf("tenant.authorization %q: the only supported value is hash", s.Authorization))
		case s.Header != "" && !validHeaderName(s.Header):
			errs = append(errs, fmt.Errorf("tenant.header %q is not a valid header name", s.Header))
		}
	}
	return errors.Join(errs...)
}

// build returns the tenant function and a description of it for the
// start-up log: the choice itself is the gateway's (gateway.Tenant). nil t
// is the default: a keyed hash of Authorization.
func (t *Tenant) build(mac func([]byte) string) (idemhttp.TenantFunc, string) {
	if t == nil {
		return gateway.Tenant(false, nil, mac)
	}
	sources := make([]gateway.TenantSource, len(t.Sources))
	for i, s := range t.Sources {
		sources[i] = gateway.TenantSource{Header: s.Header, Authorization: s.Authorization != ""}
	}
	return gateway.Tenant(t.None, sources, mac)
}
