package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// VersionCommand prints the module version and the Go toolchain.
type VersionCommand struct{ m *Main }

// Run prints "idem VERSION (REVISION) GOVERSION OS/ARCH".
func (c *VersionCommand) Run(_ context.Context, args []string) error {
	fs := c.m.flagSet("version", "version")
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(c.m.Stdout, version())
	return nil
}

func version() string {
	v, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
				if len(rev) > 12 {
					rev = rev[:12]
				}
			case "vcs.modified":
				if s.Value == "true" && rev != "" {
					rev += "+dirty"
				}
			}
		}
	}
	if rev != "" {
		v += " (" + rev + ")"
	}
	return fmt.Sprintf("idem %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
