package journal_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/eventually"

	"pam/internal/journal"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// wakeOnly makes the tailer rely on Wake alone: with an hour between polls,
// a test that passes proves that committed events go out through
// store.AfterCommit at once.
var wakeOnly = journal.Options{PollInterval: time.Hour}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestResumeWithLastEventID(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	hub, _ := startHub(t, s, wakeOnly)
	srv := newServer(t, hub)
	journalN(t, s, "project.created", 100)
	all := stored(t, s, 0, "")
	if len(all) != 100 {
		t.Fatalf("journaled %d events, want 100", len(all))
	}

	first := connect(t, srv.URL+"?after=0", "")
	got := first.read(t, 40)
	checkFrames(t, got, all[:40])
	first.Close()
	eventually.Wait(t, testTimeout, "the first subscriber to leave", func() bool { return hub.Subscribers() == 0 })

	second := connect(t, srv.URL, itoa(got[39].ID))
	checkFrames(t, second.read(t, 60), all[40:])
	// Nothing else is pending: the next event read is the next journaled.
	journal1(t, s, store.NewEvent{Topic: "project.updated"})
	checkFrames(t, second.read(t, 1), stored(t, s, all[99].Seq, ""))
}

// TestResumeWhileJournaling reconnects every 25 events while four writers
// journal concurrently, so registrations race with the tailer and with
// backfills: the concatenation must still be exactly the journal.
func TestResumeWhileJournaling(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	hub, _ := startHub(t, s, wakeOnly)
	srv := newServer(t, hub)
	journalN(t, s, "run.started", 100)

	const writers, perWriter = 4, 50
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				evs := []store.NewEvent{{Topic: "run.progress", Payload: map[string]int{"writer": w, "i": i}}}
				if i%5 == 0 {
					evs = append(evs, store.NewEvent{Topic: "run.completed", Payload: map[string]int{"writer": w}})
				}
				if err := s.InTx(ctx, func(tx *store.Tx) error { return tx.Journal(ctx, evs...) }); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	total := 100 + writers*perWriter + writers*perWriter/5

	var got []sseFrame
	cursor := "0"
	for len(got) < total {
		st := connect(t, srv.URL, cursor)
		batch := st.read(t, min(25, total-len(got)))
		st.Close()
		got = append(got, batch...)
		cursor = itoa(batch[len(batch)-1].ID)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	checkFrames(t, got, stored(t, s, 0, ""))
}

func TestResumeAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.URL(t)

	s1, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s1.Close)
	hub1, stop1 := startHub(t, s1, wakeOnly)
	srv1 := httptest.NewServer(sseHandler(hub1))
	t.Cleanup(srv1.Close)
	journalN(t, s1, "run.started", 30)
	st := connect(t, srv1.URL+"?after=0", "")
	got := st.read(t, 10)

	// Stopping the hub ends its streams, so clients reconnect elsewhere.
	stop1()
	for {
		if _, err := st.next(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("stream still open after the hub stopped")
			}
			break
		}
	}
	// And a stopped hub refuses new subscribers with the error envelope.
	resp, err := http.Get(srv1.URL)
	if err != nil {
		t.Fatal(err)
	}
	var env wire.Envelope
	err = json.NewDecoder(resp.Body).Decode(&env)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || err != nil || env.Error == nil || env.Error.Code != wire.CodeUnavailable {
		t.Fatalf("subscribe to a stopped hub: %s, %v, %+v", resp.Status, err, env.Error)
	}
	srv1.Close()
	s1.Close()

	s2, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	journalN(t, s2, "run.finished", 20) // while no server runs
	hub2, _ := startHub(t, s2, wakeOnly)
	srv2 := httptest.NewServer(sseHandler(hub2))
	t.Cleanup(srv2.Close)
	resumed := connect(t, srv2.URL+"?after="+itoa(got[9].ID), "")
	journalN(t, s2, "run.exited", 10)

	want := stored(t, s2, got[9].ID, "")
	if len(want) != 50 {
		t.Fatalf("%d events after %d, want 50", len(want), got[9].ID)
	}
	checkFrames(t, resumed.read(t, len(want)), want)
}

func TestTopicFilter(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	hub, _ := startHub(t, s, wakeOnly)
	srv := newServer(t, hub)
	mix := func() {
		journal1(t, s,
			store.NewEvent{Topic: "run.started"},
			store.NewEvent{Topic: "run.a.b"},
			store.NewEvent{Topic: "project.created"},
			store.NewEvent{Topic: "project.updated"},
			store.NewEvent{Topic: "runx.started"},
			store.NewEvent{Topic: "run.finished"},
			store.NewEvent{Topic: "host.updated"},
		)
	}
	mix() // read by the backfill
	runs := connect(t, srv.URL+"?after=0&topic=run.*", "")
	projects := connect(t, srv.URL+"?after=0&topic=project.created", "")
	mix() // delivered live

	wantRuns := stored(t, s, 0, "run.*")
	topics := make([]string, len(wantRuns))
	for i, e := range wantRuns {
		topics[i] = e.Topic
	}
	if strings.Join(topics, " ") != "run.started run.finished run.started run.finished" {
		t.Fatalf("run.* selects %v", topics)
	}
	checkFrames(t, runs.read(t, 4), wantRuns)
	checkFrames(t, projects.read(t, 2), stored(t, s, 0, "project.created"))

	// Nothing that does not match was queued in between.
	head := lastSeq(t, s)
	journal1(t, s,
		store.NewEvent{Topic: "run.a.b"},
		store.NewEvent{Topic: "project.updated"},
		store.NewEvent{Topic: "run.stopped"},
		store.NewEvent{Topic: "project.created"},
	)
	checkFrames(t, runs.read(t, 1), stored(t, s, head, "run.*"))
	checkFrames(t, projects.read(t, 1), stored(t, s, head, "project.created"))
}

// TestBackfillPages reads a backlog longer than one page, with and without
// a filter that skips every other event.
func TestBackfillPages(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	hub, _ := startHub(t, s, wakeOnly)
	srv := newServer(t, hub)
	for range 6 {
		evs := make([]store.NewEvent, 0, 400)
		for i := range 200 {
			evs = append(evs,
				store.NewEvent{Topic: "run.progress", Payload: map[string]int{"i": i}},
				store.NewEvent{Topic: "project.updated", Payload: map[string]int{"i": i}})
		}
		journal1(t, s, evs...)
	}
	all := stored(t, s, 0, "")
	checkFrames(t, connect(t, srv.URL+"?after=0", "").read(t, len(all)), all)
	runs := stored(t, s, 0, "run.*")
	checkFrames(t, connect(t, srv.URL+"?after=0&topic=run.*", "").read(t, len(runs)), runs)
}

func TestPurgedCursorGetsSnapshot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storetest.New(t)
	hub, _ := startHub(t, s, wakeOnly)
	srv := newServer(t, hub)
	journalN(t, s, "run.started", 10)
	n, err := s.PurgeEvents(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 10 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	purged, err := s.PurgedThrough(ctx)
	if err != nil {
		t.Fatal(err)
	}
	journalN(t, s, "run.finished", 5)

	st := connect(t, srv.URL+"?after=1", "")
	snap := st.read(t, 1)[0]
	if snap.Event != "snapshot" || snap.ID != purged {
		t.Fatalf("first frame: %+v, want a snapshot with id %d", snap, purged)
	}
	var data wire.Snapshot
	if err := json.Unmarshal([]byte(snap.Data), &data); err != nil || data.Reason != "cursor_purged" {
		t.Fatalf("snapshot data %s: %v", snap.Data, err)
	}
	if !strings.Contains(snap.Data, `"runs":[`) || !strings.Contains(snap.Data, `"hosts":[`) {
		t.Fatalf("snapshot data %s: runs and hosts must be arrays", snap.Data)
	}
	checkFrames(t, st.read(t, 5), stored(t, s, purged, ""))
	head := lastSeq(t, s)
	journal1(t, s, store.NewEvent{Topic: "run.exited"})
	checkFrames(t, st.read(t, 1), stored(t, s, head, ""))

	// A cursor at the purge horizon lost nothing: no snapshot.
	checkFrames(t, connect(t, srv.URL, itoa(purged)).read(t, 6), stored(t, s, purged, ""))
}

func TestRunPurgesByRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storetest.New(t)
	journalN(t, s, "run.started", 5)
	if _, err := s.Pool.Exec(ctx, `UPDATE events SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	journalN(t, s, "run.finished", 2)
	oldest := stored(t, s, 0, "")[4].Seq

	hub, _ := startHub(t, s, journal.Options{PollInterval: time.Hour, Retention: time.Hour})
	eventually.Wait(t, testTimeout, "the purge at start", func() bool {
		n, err := s.PurgedThrough(ctx)
		return err == nil && n == oldest
	})
	kept := stored(t, s, 0, "")
	if len(kept) != 2 || kept[0].Topic != "run.finished" {
		t.Fatalf("kept %v, want the two recent events", eventSeqs(kept))
	}
	st := connect(t, newServer(t, hub).URL+"?after=0", "")
	if f := st.read(t, 1)[0]; f.Event != "snapshot" || f.ID != oldest {
		t.Fatalf("first frame %+v, want a snapshot at %d", f, oldest)
	}
	checkFrames(t, st.read(t, 2), kept)
}

// TestPollWithoutWake covers events committed by another process, which
// no AfterCommit hook reports: the periodic poll must find them.
func TestPollWithoutWake(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	hub := journal.NewHub(s, journal.Options{PollInterval: 20 * time.Millisecond})
	runHub(t, hub)
	srv := newServer(t, hub)
	journalN(t, s, "host.updated", 1)
	st := connect(t, srv.URL+"?after=0", "")
	// The backfill wrote the first event and is done: later ones can only
	// come through the tailer.
	first := stored(t, s, 0, "")
	checkFrames(t, st.read(t, 1), first)
	journalN(t, s, "host.updated", 3)
	checkFrames(t, st.read(t, 3), stored(t, s, first[0].Seq, ""))
}

// TestServeBeforeRun covers the HTTP server accepting a subscriber before
// the hub has read the journal's head: the subscriber waits for it.
func TestServeBeforeRun(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	hub := journal.NewHub(s, wakeOnly)
	s.AfterCommit = hub.Wake
	srv := newServer(t, hub)
	journalN(t, s, "run.started", 2)

	type result struct {
		st  *sseStream
		err error
	}
	connected := make(chan result, 1)
	go func() {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"?after=0", nil)
		if err != nil {
			connected <- result{err: err}
			return
		}
		ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			connected <- result{err: err}
			return
		}
		connected <- result{st: &sseStream{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}}
	}()
	runHub(t, hub)
	res := <-connected
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Cleanup(res.st.Close)
	checkFrames(t, res.st.read(t, 2), stored(t, s, 0, ""))
	journalN(t, s, "run.finished", 1)
	checkFrames(t, res.st.read(t, 1), stored(t, s, 0, "run.finished"))
}

// TestLiveStreamKeepsWhatCommitsAsItConnects: a stream without a cursor
// sends every event committed once its subscriber registered, also one
// that commits (and is published) before the handler has read anything.
// Reading the live horizon after registering skipped such an event: it
// was at once below the horizon and in the queue.
func TestLiveStreamKeepsWhatCommitsAsItConnects(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	hub, _ := startHub(t, s, wakeOnly)
	journalN(t, s, "project.created", 3)
	before := lastSeq(t, s)
	journal.SetAfterRegister(hub, func() {
		journal1(t, s, store.NewEvent{Topic: "project.updated"})
		// Published to the queue before the handler goes on.
		eventually.Wait(t, testTimeout, "the hub to publish the event", func() bool {
			return lastSeq(t, s) > before && hub.Published() > before
		})
	})
	srv := newServer(t, hub)
	st := connect(t, srv.URL, "")
	checkFrames(t, st.read(t, 1), stored(t, s, before, ""))
}
