package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as Go writes durations ("90s",
// "24h"), with days as an extra unit ("7d", "1d12h") since record TTLs are
// usually counted in days. "off" is -1, which only cleanup_interval accepts.
type Duration time.Duration

// ParseDuration parses the forms Duration accepts.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return 0, fmt.Errorf("empty duration")
	case "off", "disabled":
		return -1, nil
	case "0":
		return 0, nil
	}
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseUint(s[:i], 10, 16)
		if err != nil {
			return 0, fmt.Errorf("bad duration %q", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q: want e.g. 500ms, 90s, 24h or 7d", s)
	}
	if days > 0 && d < 0 {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return days + d, nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 24h or 7d", n.Line)
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// ByteSize is a size in bytes: a plain number or one with a unit (KB, MB,
// GB, KiB, MiB, GiB; case does not matter).
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	{"b", 1},
}

// ParseByteSize parses the forms ByteSize accepts.
func ParseByteSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q: want e.g. 4MiB or 1048576", s)
	}
	return n * mult, nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size such as 4MiB", n.Line)
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*b = ByteSize(v)
	return nil
}

// StringList is a YAML list of strings that may also be written as one
// comma-separated string ("2xx, 409").
type StringList []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = nil
		for _, f := range strings.Split(n.Value, ",") {
			if f = strings.TrimSpace(f); f != "" {
				*l = append(*l, f)
			}
		}
		return nil
	case yaml.SequenceNode:
		*l = nil
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: want a list of strings", c.Line)
			}
			*l = append(*l, c.Value)
		}
		return nil
	}
	return fmt.Errorf("line %d: want a list of strings", n.Line)
}

// Fingerprint is what identifies a request: "body" (the default), "none",
// or {fields: [a, b.c]}.
type Fingerprint struct {
	Mode   string // "body", "none" or "fields"
	Fields []string
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (f *Fingerprint) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Value {
		case "body", "none":
			*f = Fingerprint{Mode: n.Value}
			return nil
		}
		return fmt.Errorf("line %d: fingerprint %q: want body, none or {fields: [...]}", n.Line, n.Value)
	case yaml.MappingNode:
		*f = Fingerprint{Mode: "fields"}
		seen := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value != "fields" {
				return fmt.Errorf("line %d: fingerprint: unknown field %q (want fields)", k.Line, k.Value)
			}
			seen = true
			var l StringList
			if err := l.UnmarshalYAML(v); err != nil {
				return err
			}
			f.Fields = l
		}
		if !seen || len(f.Fields) == 0 {
			return fmt.Errorf("line %d: fingerprint: fields is empty", n.Line)
		}
		return nil
	}
	return fmt.Errorf("line %d: fingerprint: want body, none or {fields: [...]}", n.Line)
}

// Count is a whole number. YAML decodes 1.5 into an int as 1; a Count
// refuses it.
type Count int

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *Count) UnmarshalYAML(n *yaml.Node) error {
	var v int
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a whole number, such as 255", n.Line)
	}
	if n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		return fmt.Errorf("line %d: %q is not a whole number: want one such as 255", n.Line, n.Value)
	}
	*c = Count(v)
	return nil
}
