package placement_test

import (
	"reflect"
	"testing"

	"pam/internal/placement"
)

func TestPlace(t *testing.T) {
	shell := func(id string) placement.Run { return placement.Run{ID: id, Provider: "shell"} }
	pinned := func(id, host string) placement.Run {
		return placement.Run{ID: id, Provider: "shell", TargetHostID: host}
	}
	host := func(id string, capacity, active int, providers ...string) placement.Host {
		if len(providers) == 0 {
			providers = []string{"shell"}
		}
		return placement.Host{ID: id, Providers: providers, Capacity: capacity, Active: active}
	}
	none := map[string]bool{}
	for _, c := range []struct {
		name    string
		runs    []placement.Run
		hosts   []placement.Host
		refused map[string]bool // "run/host"
		want    []placement.Choice
	}{
		{"no hosts", []placement.Run{shell("r1")}, nil, none,
			[]placement.Choice{{}}},
		{"least loaded wins", []placement.Run{shell("r1")}, []placement.Host{host("a", 4, 2), host("b", 4, 1)}, none,
			[]placement.Choice{{HostID: "b", Matched: true}}},
		{"a tie goes to the earlier host", []placement.Run{shell("r1")}, []placement.Host{host("a", 4, 1), host("b", 4, 1)}, none,
			[]placement.Choice{{HostID: "a", Matched: true}}},
		{"each offer counts against the next", []placement.Run{shell("r1"), shell("r2"), shell("r3")},
			[]placement.Host{host("a", 4, 0), host("b", 4, 0)}, none,
			[]placement.Choice{{HostID: "a", Matched: true}, {HostID: "b", Matched: true}, {HostID: "a", Matched: true}}},
		{"full hosts match but take nothing", []placement.Run{shell("r1")}, []placement.Host{host("a", 1, 1), host("b", 2, 3)}, none,
			[]placement.Choice{{Matched: true}}},
		{"capacity runs out within the pass", []placement.Run{shell("r1"), shell("r2")}, []placement.Host{host("a", 1, 0)}, none,
			[]placement.Choice{{HostID: "a", Matched: true}, {Matched: true}}},
		{"a host without the provider is not eligible", []placement.Run{{ID: "r1", Provider: "claude"}},
			[]placement.Host{host("a", 4, 0), host("b", 4, 3, "shell", "claude")}, none,
			[]placement.Choice{{HostID: "b", Matched: true}}},
		{"no host carries the provider", []placement.Run{{ID: "r1", Provider: "codex"}}, []placement.Host{host("a", 4, 0)}, none,
			[]placement.Choice{{}}},
		{"a pinned run goes only to its target", []placement.Run{pinned("r1", "b")}, []placement.Host{host("a", 4, 0), host("b", 4, 3)}, none,
			[]placement.Choice{{HostID: "b", Matched: true}}},
		{"a pinned run waits for its full target", []placement.Run{pinned("r1", "b")}, []placement.Host{host("a", 4, 0), host("b", 1, 1)}, none,
			[]placement.Choice{{Matched: true}}},
		{"a pinned run whose target is not a candidate", []placement.Run{pinned("r1", "c")}, []placement.Host{host("a", 4, 0)}, none,
			[]placement.Choice{{}}},
		{"a refusing host is passed over", []placement.Run{shell("r1")}, []placement.Host{host("a", 4, 0), host("b", 4, 2)},
			map[string]bool{"r1/a": true},
			[]placement.Choice{{HostID: "b", Matched: true}}},
		{"a refusing host still matches", []placement.Run{shell("r1"), shell("r2")}, []placement.Host{host("a", 4, 0)},
			map[string]bool{"r1/a": true},
			[]placement.Choice{{Matched: true}, {HostID: "a", Matched: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := placement.Place(c.runs, c.hosts, func(run, host string) bool { return c.refused[run+"/"+host] })
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Place = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestPlaceLeavesHostsAlone(t *testing.T) {
	hosts := []placement.Host{{ID: "a", Providers: []string{"shell"}, Capacity: 2}}
	placement.Place([]placement.Run{{ID: "r1", Provider: "shell"}}, hosts, nil)
	if hosts[0].Active != 0 {
		t.Errorf("Place changed its input: %+v", hosts[0])
	}
}
