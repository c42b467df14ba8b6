// Package placement chooses the host each due run is offered to
// (docs/architecture.md#dispatch-offer-and-ack). It is pure: the
// dispatcher reads the due runs, the connected candidate hosts and the
// recent refusals in one transaction, asks Place, and writes the offers.
package placement

import "slices"

// Run is what placement reads of a due run.
type Run struct {
	ID           string
	Provider     string
	TargetHostID string // "" when the run may go to any host
}

// Host is a candidate host: online, enabled, connected to this process.
type Host struct {
	ID        string
	Providers []string
	Capacity  int // the most runs it takes
	Active    int // its pending, spawning and running runs
}

// Choice is the outcome for one run.
type Choice struct {
	// HostID is the host the run is offered to, "" when none has room.
	HostID string
	// Matched is true when some host is eligible in every respect but
	// capacity (and a recent refusal): the run is not unplaceable, and
	// its dispatch timeout fails it dispatch_timeout rather than
	// no_eligible_host.
	Matched bool
}

// Place chooses a host for each run, in order: among the hosts that
// carry its provider (and are its target, when it has one), the least
// loaded with room, ties to the earlier host. A host that refused the
// run's current attempt moments ago (refused(run, host)) is not offered it
// again but still counts as a match. Each offer counts against its host's
// capacity for the runs after it.
func Place(runs []Run, hosts []Host, refused func(runID, hostID string) bool) []Choice {
	active := make([]int, len(hosts))
	for i, h := range hosts {
		active[i] = h.Active
	}
	out := make([]Choice, len(runs))
	for i, r := range runs {
		best := -1
		for j, h := range hosts {
			if !slices.Contains(h.Providers, r.Provider) || (r.TargetHostID != "" && r.TargetHostID != h.ID) {
				continue
			}
			out[i].Matched = true // eligible in every respect but capacity
			if refused != nil && refused(r.ID, h.ID) {
				continue // it said no to this attempt moments ago
			}
			if active[j] < h.Capacity && (best < 0 || active[j] < active[best]) {
				best = j
			}
		}
		if best >= 0 {
			active[best]++
			out[i].HostID = hosts[best].ID
		}
	}
	return out
}
