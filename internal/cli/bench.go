package cli

import "slices"

// benchCmd groups the load drivers: each measures a running pam (a real
// serve on loopback, started and stopped by the command) and prints the
// figures the `make bench` table reads.
var benchCmd = &command{
	name:    "bench",
	summary: "measure pam under load on this machine (loopback only)",
}

// The bench group sits before the diagnostics (doctor, version) in help.
func init() {
	i := slices.Index(root.subs, doctorCmd)
	if i < 0 {
		i = len(root.subs)
	}
	root.subs = slices.Insert(root.subs, i, benchCmd)
}
