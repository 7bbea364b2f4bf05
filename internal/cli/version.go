package cli

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time with -ldflags "-X .../internal/cli.version=v1.2.3".
var version = ""

// VersionOptions are the options of `gochat version`.
type VersionOptions struct {
	g *Globals
}

func newVersionCmd(g *Globals, runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{g: g}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the gochat version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runVersion(opts)
		},
	}
}

func runVersion(opts *VersionOptions) error {
	v, rev := buildVersion()
	_, err := fmt.Fprintf(opts.g.Out, "gochat %s (%s, %s, %s/%s)\n", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// buildVersion returns the module version and VCS revision of this binary.
func buildVersion() (ver, rev string) {
	ver, rev = version, "unknown revision"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return cmp.Or(ver, "devel"), rev
	}
	if ver == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		ver = info.Main.Version
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			rev = s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			rev += "+dirty"
		}
	}
	return cmp.Or(ver, "devel"), rev
}
