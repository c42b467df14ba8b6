package cli

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, set at build time with
// -ldflags "-X pam/internal/cli.Version=v1.2.3"; otherwise the module
// version from the build info, or "dev".
var Version = ""

// Commit is the commit the release was built from, set at build time with
// -ldflags "-X pam/internal/cli.Commit=<sha>" (make release does both);
// otherwise the build info's vcs.revision, when go build recorded one.
var Commit = ""

// buildInfo is what `pam version` reports.
type buildInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Revision  string `json:"revision"`
	Time      string `json:"revision_time"`
	Modified  bool   `json:"modified"`
	Platform  string `json:"platform"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if Commit != "" && Commit != b.Revision {
		b.Revision, b.Time, b.Modified = Commit, "", false
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// versionString is the one-word version serve reports.
func versionString() string { return readBuildInfo().Version }

var versionCmd = &command{
	name:    "version",
	summary: "print the version and build info",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		asJSON := fs.Bool("json", false, "print as JSON")
		return func(x *invocation) error {
			b := readBuildInfo()
			if *asJSON {
				return printJSON(x.stdout, b)
			}
			fmt.Fprintf(x.stdout, "pam %s\n", b.Version)
			fmt.Fprintf(x.stdout, "go:       %s %s\n", b.GoVersion, b.Platform)
			if b.Revision != "" {
				rev := b.Revision
				if b.Modified {
					rev += " (modified)"
				}
				fmt.Fprintf(x.stdout, "revision: %s\n", rev)
			}
			if b.Time != "" {
				fmt.Fprintf(x.stdout, "commit:   %s\n", b.Time)
			}
			return nil
		}
	},
}
