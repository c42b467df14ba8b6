package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pam/internal/pamtest"
	"pam/internal/wire"
)

// Issue item "refused offers loop", with a missing provider: a host
// registered with a provider whose binary then vanished refuses every
// offer of a run of it. The server offers it again only after
// PAM_DISPATCH_ACK_TIMEOUT, not at once in a loop, and the dispatch
// timeout still ends the run, dispatch_timeout (a host was eligible).
func TestMissingProviderNoChurn(t *testing.T) {
	t.Parallel()
	const ack, timeout = time.Second, 6 * time.Second
	s, _ := newFaultSystem(t, "", "PAM_DISPATCH_ACK_TIMEOUT=1s", "PAM_DISPATCH_TIMEOUT=6s")
	conf := pamtest.ShortDir(t, "pamc-")
	bin := filepath.Join(pamtest.ShortDir(t, "pamb-"), "vanishing")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho never runs\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	toml := "[providers.vanishing]\nbinary = \"" + bin + "\"\n"
	if err := os.WriteFile(filepath.Join(conf, "providers.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	s.faultWorker("vanish-host", s.url, "PAM_CONFIG_DIR="+conf)
	if h := s.host("vanish-host"); !slices.Contains(h.Providers, "vanishing") {
		t.Fatalf("the host registered providers %v, without vanishing", h.Providers)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}

	var r wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": s.task().ID, "provider": "vanishing", "prompt": "p", "max_attempts": 1}, &r)
	got := s.waitRun(r.ID, "failed", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) })
	if got.Status != wire.RunFailed || got.FailureReason == nil || *got.FailureReason != wire.FailDispatchTimeout {
		t.Fatalf("run %s %v, want failed dispatch_timeout; events %v", got.Status, got.FailureReason, s.topics(r.ID))
	}
	evs := s.events(r.ID)
	offers, withdrawn := countTopic(evs, string(wire.TopicRunDispatched)), countTopic(evs, string(wire.TopicRunDispatchWithdrawn))
	// One offer per ack timeout over the dispatch timeout, and the first.
	if most := int(timeout/ack) + 2; offers < 2 || offers > most || withdrawn > offers {
		t.Errorf("%d offers and %d withdrawals over a dispatch timeout of %s with an ack timeout of %s: want 2 to %d offers",
			offers, withdrawn, timeout, ack, most)
	}
	var refusedAt time.Time
	for _, e := range evs {
		switch e.Topic {
		case string(wire.TopicRunDispatchWithdrawn):
			refusedAt = e.CreatedAt
		case string(wire.TopicRunDispatched):
			if gap := e.CreatedAt.Sub(refusedAt); !refusedAt.IsZero() && gap < ack {
				t.Errorf("offered again %s after a refusal, within the ack timeout", gap)
			}
		}
	}
}
