package dispatch_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/clock"
	"pam/internal/dispatch"
	"pam/internal/eventually"
	"pam/internal/runs"
	"pam/internal/signaltoken"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// Every dispatcher a test starts is stopped and waited for: goleak checks
// after the tests, once the private PostgreSQL cluster is stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

const instance = "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f"

// fakeFleet is the Sender the dispatcher pushes frames to: which hosts
// have an uplink, and what each was sent. It stands in for the uplinks,
// not for PostgreSQL or the placement logic.
type fakeFleet struct {
	mu        sync.Mutex
	connected map[string]bool
	broken    map[string]bool // Send fails
	sent      map[string][]wire.Frame
	// onSend, if set, is called after each frame a host was sent, outside
	// the lock: a test's stand-in for the worker answering it.
	onSend func(h string, fr wire.Frame)
}

func newFakeFleet() *fakeFleet {
	return &fakeFleet{connected: map[string]bool{}, broken: map[string]bool{}, sent: map[string][]wire.Frame{}}
}

func (f *fakeFleet) Connected(h string) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.connected[h] }

func (f *fakeFleet) Send(h string, fr wire.Frame) error {
	f.mu.Lock()
	if !f.connected[h] || f.broken[h] {
		f.mu.Unlock()
		return errors.New("uplink down")
	}
	f.sent[h] = append(f.sent[h], fr)
	on := f.onSend
	f.mu.Unlock()
	if on != nil {
		on(h, fr)
	}
	return nil
}

func (f *fakeFleet) set(fn func(*fakeFleet)) { f.mu.Lock(); defer f.mu.Unlock(); fn(f) }

// sentOf lists the frames of type T sent to h.
func sentOf[T wire.Frame](f *fakeFleet, h string) []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []T
	for _, fr := range f.sent[h] {
		if t, ok := fr.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// sys is a store on its own database, a fake fleet, and a task to run.
type sys struct {
	t      *testing.T
	s      *store.Store
	fleet  *fakeFleet
	task   wire.WorkItem
	passes atomic.Int64
	clk    *clock.Manual // set by manualClock
	d      *dispatch.Dispatcher
}

func newSys(t *testing.T) *sys {
	t.Helper()
	st := storetest.New(t)
	st.Policy = store.Policy{MaxAttempts: 3, RestartInitialDelay: 300 * time.Millisecond, RestartMaxDelay: time.Second}
	p, err := st.CreateProject(t.Context(), wire.CreateProject{Name: "Dispatch"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := st.CreateWorkItem(t.Context(), p.Slug, wire.CreateWorkItem{Kind: "task", Title: "Place me"})
	if err != nil {
		t.Fatal(err)
	}
	return &sys{t: t, s: st, fleet: newFakeFleet(), task: task}
}

// manualClock stops the store's clock (the dispatcher's too) at the real
// time; from then on only advance moves it. Call it before anything is
// created, so every time the store writes is the clock's.
func (y *sys) manualClock() {
	y.clk = clock.NewManual(time.Now())
	y.s.Clock = y.clk.Now
}

// advance moves the manual clock d forward and waits for a pass that
// began after it.
func (y *sys) advance(d time.Duration) {
	y.t.Helper()
	y.clk.Advance(d)
	from := y.passes.Load()
	y.d.Wake()
	// The pass running when the clock moved may have read it before: the
	// one after it did not.
	eventually.Wait(y.t, eventually.Medium, "a pass after the clock moved", func() bool { return y.passes.Load() >= from+2 })
}

// host registers an online host offering providers, connected or not.
func (y *sys) host(name string, maxRuns int, connected bool, providers ...string) wire.Host {
	y.t.Helper()
	ctx := y.t.Context()
	h, err := y.s.CreateHost(ctx, wire.CreateHost{Name: name, MaxRuns: &maxRuns})
	if err != nil {
		y.t.Fatal(err)
	}
	if _, err := y.s.Register(ctx, h.Host, wire.Register{HostName: name, InstanceID: instance, Providers: providers,
		MaxRuns: maxRuns, Protocol: wire.UplinkProtocol}, time.Minute); err != nil {
		y.t.Fatal(err)
	}
	if _, err := y.s.Heartbeat(ctx, h.Host.ID); err != nil {
		y.t.Fatal(err)
	}
	y.fleet.set(func(f *fakeFleet) { f.connected[h.Host.ID] = connected })
	return h.Host
}

func (y *sys) run(provider string, target *string) wire.Run {
	y.t.Helper()
	r, err := runs.New(y.s).CreateRun(y.t.Context(), wire.CreateRun{TaskID: y.task.ID, Provider: provider, HostID: target})
	if err != nil {
		y.t.Fatal(err)
	}
	return r
}

// start runs a dispatcher until the test ends, and waits for it to stop.
func (y *sys) start(o dispatch.Options) *dispatch.Dispatcher {
	y.t.Helper()
	o.AfterPass = func() { y.passes.Add(1) }
	if o.Tick == 0 {
		o.Tick = 50 * time.Millisecond
	}
	d := dispatch.New(y.s, y.fleet, o)
	y.d = d
	ctx, cancel := context.WithCancel(y.t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	y.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			y.t.Errorf("dispatcher: %v", err)
		}
	})
	return d
}

// waitPasses waits until n more passes have run.
func (y *sys) waitPasses(n int64) {
	y.t.Helper()
	from := y.passes.Load()
	eventually.Wait(y.t, eventually.Medium, "dispatcher passes", func() bool { return y.passes.Load() >= from+n })
}

func (y *sys) get(id string) wire.Run {
	y.t.Helper()
	r, err := y.s.GetRun(y.t.Context(), id)
	if err != nil {
		y.t.Fatal(err)
	}
	return r
}

func (y *sys) topics(runID string) []string {
	y.t.Helper()
	evs, err := y.s.RunEvents(y.t.Context(), runID, math.MaxInt64)
	if err != nil {
		y.t.Fatal(err)
	}
	var t []string
	for _, e := range evs {
		t = append(t, e.Topic)
	}
	return t
}

// A due run is offered to an eligible connected host: run_dispatch with
// the run's fields and a signal token the store verifies, journaled
// run.dispatched; nothing goes to a host without an uplink or without the
// provider, and a pinned run only to its host.
func TestOffersToTheEligibleHost(t *testing.T) {
	t.Parallel()
	y := newSys(t)
	good := y.host("good", 4, true, "shell")
	y.host("offline-uplink", 4, false, "shell")
	y.host("no-provider", 4, true, "claude")
	pinned := y.host("pinned", 4, true, "shell")
	free := y.run("shell", nil)
	pin := y.run("shell", &pinned.ID)
	y.start(dispatch.Options{})

	offers := func() []wire.RunDispatchFrame {
		return append(sentOf[wire.RunDispatchFrame](y.fleet, good.ID), sentOf[wire.RunDispatchFrame](y.fleet, pinned.ID)...)
	}
	eventually.Wait(t, eventually.Medium, "run_dispatch of both runs", func() bool { return len(offers()) == 2 })
	y.waitPasses(2)
	if n := len(offers()); n != 2 {
		t.Fatalf("%d offers, want 2", n)
	}
	var f wire.RunDispatchFrame
	for _, fr := range offers() {
		if fr.RunID == free.ID {
			f = fr
		}
	}
	if fs := sentOf[wire.RunDispatchFrame](y.fleet, pinned.ID); !slices.ContainsFunc(fs, func(f wire.RunDispatchFrame) bool { return f.RunID == pin.ID }) {
		t.Fatalf("the pinned run was not offered to its host: %+v", fs)
	}
	freeHost := good.ID
	if slices.ContainsFunc(sentOf[wire.RunDispatchFrame](y.fleet, pinned.ID), func(f wire.RunDispatchFrame) bool { return f.RunID == free.ID }) {
		freeHost = pinned.ID
	}
	key, err := y.s.SignalSecret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	host, attempt, ok := signaltoken.Verify(key, free.ID, f.SignalToken)
	if !ok || host != freeHost || attempt != 1 {
		t.Errorf("signal token verifies as host %s attempt %d: %v", host, attempt, ok)
	}
	if r := y.get(free.ID); r.Status != wire.RunPending || r.HostID == nil || *r.HostID != freeHost {
		t.Errorf("offered run %+v", r)
	}
	if got := y.topics(free.ID); !slices.Equal(got, []string{"run.created", "run.dispatched"}) {
		t.Errorf("events %v", got)
	}
}

// Capacity: a host never gets more active runs than max_runs, and equal
// hosts share the load.
func TestCapacityAndSpread(t *testing.T) {
	t.Parallel()
	y := newSys(t)
	a := y.host("a", 2, true, "shell")
	b := y.host("b", 2, true, "shell")
	var runs []wire.Run
	for range 5 {
		runs = append(runs, y.run("shell", nil))
	}
	y.start(dispatch.Options{})
	eventually.Wait(t, eventually.Medium, "four offers", func() bool {
		return len(sentOf[wire.RunDispatchFrame](y.fleet, a.ID))+len(sentOf[wire.RunDispatchFrame](y.fleet, b.ID)) == 4
	})
	y.waitPasses(3)
	if na, nb := len(sentOf[wire.RunDispatchFrame](y.fleet, a.ID)), len(sentOf[wire.RunDispatchFrame](y.fleet, b.ID)); na != 2 || nb != 2 {
		t.Fatalf("offers a=%d b=%d, want 2 and 2 (max_runs 2 each)", na, nb)
	}
	waiting := 0
	for _, r := range runs {
		if got := y.get(r.ID); got.HostID == nil {
			waiting++
		}
	}
	if waiting != 1 {
		t.Errorf("%d runs wait for capacity, want 1", waiting)
	}
}

// An offer whose push fails is withdrawn at the ack timeout, not before,
// and goes to a host that takes it.
func TestFailedPushIsWithdrawnAndReoffered(t *testing.T) {
	t.Parallel()
	const ack = time.Minute
	y := newSys(t)
	y.manualClock()
	bad := y.host("bad", 4, true, "shell")
	y.fleet.set(func(f *fakeFleet) { f.broken[bad.ID] = true })
	r := y.run("shell", nil)
	y.start(dispatch.Options{AckTimeout: ack, Tick: 20 * time.Millisecond})
	eventually.Wait(t, eventually.Medium, "the offer to the broken host", func() bool {
		got := y.get(r.ID)
		return got.HostID != nil && *got.HostID == bad.ID
	})
	good := y.host("good", 4, true, "shell")
	y.fleet.set(func(f *fakeFleet) { f.connected[bad.ID] = false })
	y.advance(ack - time.Second)
	if got := y.get(r.ID); got.HostID == nil || *got.HostID != bad.ID {
		t.Fatalf("the offer was withdrawn within the ack timeout: host %v, events %v", got.HostID, y.topics(r.ID))
	}
	y.advance(2 * time.Second)
	eventually.Wait(t, eventually.Medium, "run_dispatch to the good host", func() bool {
		return len(sentOf[wire.RunDispatchFrame](y.fleet, good.ID)) == 1
	})
	if got := y.topics(r.ID); !slices.Equal(got, []string{"run.created", "run.dispatched", "run.dispatch_withdrawn", "run.dispatched"}) {
		t.Errorf("events %v", got)
	}
}

// A requeued run waits out its backoff, then is offered again without
// anyone waking the dispatcher: it sleeps until the next due time, not a
// whole tick.
func TestBackoffThenReoffer(t *testing.T) {
	t.Parallel()
	y := newSys(t)
	h := y.host("h", 4, true, "shell")
	r := y.run("shell", nil)
	d := y.start(dispatch.Options{Tick: time.Hour})
	eventually.Wait(t, eventually.Medium, "first offer", func() bool { return len(sentOf[wire.RunDispatchFrame](y.fleet, h.ID)) == 1 })
	yes := true
	if _, err := runs.New(y.s).AckOffer(t.Context(), h.ID, wire.RunDispatchAckFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Accepted: &yes}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runs.New(y.s).RunStateReport(t.Context(), h.ID, wire.RunStateFrame{RunID: r.ID, Attempt: wire.IntPtr(1), State: wire.StateSpawnFailed, Detail: "test"}); err != nil {
		t.Fatal(err)
	}
	got := y.get(r.ID)
	if got.Status != wire.RunPending || got.Attempt != 2 || got.NextAttemptAt == nil || !got.NextAttemptAt.After(time.Now()) {
		t.Fatalf("after the failure: %+v", got)
	}
	due := *got.NextAttemptAt
	// The server wakes the dispatcher once when a run changes; after that
	// nothing but its own next-due timer does (the tick is an hour): the
	// offer of attempt 2 comes when the backoff ends, not an hour later.
	d.Wake()
	eventually.Wait(t, eventually.Medium, "the offer of attempt 2", func() bool { return len(sentOf[wire.RunDispatchFrame](y.fleet, h.ID)) == 2 })
	f := sentOf[wire.RunDispatchFrame](y.fleet, h.ID)[1]
	if *f.Attempt != 2 {
		t.Errorf("second offer is attempt %d", *f.Attempt)
	}
	if now := time.Now(); now.Before(due) {
		t.Errorf("offered %s before its backoff ended", due.Sub(now))
	}
}

// Restart grace: no host is marked offline until PAM_HOST_OFFLINE_AFTER
// has passed since the dispatcher started, however old its heartbeat.
func TestRestartGrace(t *testing.T) {
	t.Parallel()
	const offlineAfter = time.Minute
	y := newSys(t)
	y.manualClock()
	h := y.host("quiet", 4, true, "shell")
	if _, err := y.s.Pool.Exec(t.Context(), `UPDATE hosts SET last_seen_at = $2::timestamptz - interval '1 hour' WHERE id = $1`, h.ID, y.clk.Now()); err != nil {
		t.Fatal(err)
	}
	y.start(dispatch.Options{HostOfflineAfter: offlineAfter, Tick: 20 * time.Millisecond})
	y.waitPasses(3)
	y.advance(offlineAfter - time.Second)
	if got, _ := y.s.GetHost(t.Context(), h.ID); got.Status != "online" {
		t.Fatalf("host %s within the restart grace", got.Status)
	}
	y.advance(2 * time.Second)
	eventually.Wait(t, eventually.Medium, "the host offline after the grace", func() bool {
		got, _ := y.s.GetHost(t.Context(), h.ID)
		return got.Status == "offline"
	})
}

// A run whose pane stopped changing on an online host fails cli_hang and
// its host is told to stop the session (the graceful ladder, not forced).
func TestHungRunStopped(t *testing.T) {
	t.Parallel()
	const hang = time.Minute
	y := newSys(t)
	y.manualClock()
	h := y.host("h", 4, true, "shell")
	r := y.run("shell", nil)
	y.start(dispatch.Options{CLIHangTimeout: hang, HostOfflineAfter: time.Hour, Tick: 20 * time.Millisecond})
	eventually.Wait(t, eventually.Medium, "the offer", func() bool { return len(sentOf[wire.RunDispatchFrame](y.fleet, h.ID)) == 1 })
	one := 1
	if _, err := runs.New(y.s).IngestSignal(t.Context(), r.ID, h.ID, wire.Signal{Kind: wire.SignalStarted, Source: wire.SourceWrapper, Attempt: &one}); err != nil {
		t.Fatal(err)
	}
	y.advance(hang - time.Second)
	if got := y.get(r.ID); got.Status != wire.RunRunning || len(sentOf[wire.RunStopFrame](y.fleet, h.ID)) > 0 {
		t.Fatalf("a run quiet for less than the hang timeout: %s, events %v", got.Status, y.topics(r.ID))
	}
	y.advance(2 * time.Second)
	eventually.Wait(t, eventually.Medium, "run_stop of the hung run", func() bool { return len(sentOf[wire.RunStopFrame](y.fleet, h.ID)) == 1 })
	stop := sentOf[wire.RunStopFrame](y.fleet, h.ID)[0]
	if stop.RunID != r.ID || stop.Attempt == nil || *stop.Attempt != 1 || stop.Force {
		t.Errorf("run_stop %+v", stop)
	}
	if evs := y.topics(r.ID); !slices.Contains(evs, "run.failed") || !slices.Contains(evs, "run.requeued") {
		t.Errorf("events %v", evs)
	}
}

// A run whose agent completed its turn waits: it is not hung through
// twice the hang timeout; once it has had no input and no pane change
// for PAM_COMPLETED_STOP_AFTER it is stopped (run.stopped, source
// completed_idle, no requeue) and its host is told to stop the session
// the graceful way (docs/architecture.md#working-waiting-hung).
func TestCompletedIdleRunStopped(t *testing.T) {
	t.Parallel()
	const hang, stopAfter = time.Minute, 3 * time.Minute
	y := newSys(t)
	y.manualClock()
	h := y.host("h", 4, true, "shell")
	r := y.run("shell", nil)
	y.start(dispatch.Options{CLIHangTimeout: hang, CompletedStopAfter: stopAfter, HostOfflineAfter: time.Hour, Tick: 20 * time.Millisecond})
	eventually.Wait(t, eventually.Medium, "the offer", func() bool { return len(sentOf[wire.RunDispatchFrame](y.fleet, h.ID)) == 1 })
	one := 1
	for _, sig := range []wire.Signal{{Kind: wire.SignalStarted, Source: wire.SourceWrapper, Attempt: &one},
		{Kind: wire.SignalCompleted, Source: wire.SourceProviderHook, Attempt: &one}} {
		if res, err := runs.New(y.s).IngestSignal(t.Context(), r.ID, h.ID, sig); err != nil || res.Result != wire.ResultApplied {
			t.Fatalf("%s: %+v %v", sig.Kind, res, err)
		}
	}
	for range 4 { // to twice the hang timeout
		y.advance(hang / 2)
		if got := y.get(r.ID); got.Status != wire.RunRunning || got.Attempt != 1 || len(sentOf[wire.RunStopFrame](y.fleet, h.ID)) > 0 {
			t.Fatalf("a completed run within twice the hang timeout: %s at attempt %d; events %v", got.Status, got.Attempt, y.topics(r.ID))
		}
	}
	y.advance(stopAfter - 2*hang - time.Second)
	if got := y.get(r.ID); got.Status != wire.RunRunning || len(sentOf[wire.RunStopFrame](y.fleet, h.ID)) > 0 {
		t.Fatalf("a completed run stopped within PAM_COMPLETED_STOP_AFTER: %s; events %v", got.Status, y.topics(r.ID))
	}
	y.advance(2 * time.Second)
	eventually.Wait(t, eventually.Medium, "run_stop of the idle run", func() bool { return len(sentOf[wire.RunStopFrame](y.fleet, h.ID)) == 1 })
	stop := sentOf[wire.RunStopFrame](y.fleet, h.ID)[0]
	if stop.RunID != r.ID || stop.Attempt == nil || *stop.Attempt != 1 || stop.Force {
		t.Errorf("run_stop %+v", stop)
	}
	got := y.get(r.ID)
	if evs := y.topics(r.ID); got.Status != wire.RunStopped || got.Attempt != 1 || !slices.Contains(evs, "run.stopped") || slices.Contains(evs, "run.requeued") {
		t.Errorf("%s at attempt %d, events %v", got.Status, got.Attempt, evs)
	}
}

// Wake runs a pass at once even with an hour-long tick.
func TestWake(t *testing.T) {
	t.Parallel()
	y := newSys(t)
	h := y.host("h", 4, true, "shell")
	d := y.start(dispatch.Options{Tick: time.Hour})
	y.waitPasses(1) // the first pass runs at start
	y.run("shell", nil)
	d.Wake()
	eventually.Wait(t, eventually.Medium, "the offer after Wake", func() bool { return len(sentOf[wire.RunDispatchFrame](y.fleet, h.ID)) == 1 })
}

// A pass that comes after a run's dispatch timeout has passed (a loaded
// server) first looks for a host for it: a host eligible but for capacity
// makes the failure dispatch_timeout, not no_eligible_host, and a run no
// host offers fails no_eligible_host.
func TestLatePassJudgesEligibilityFirst(t *testing.T) {
	t.Parallel()
	y := newSys(t)
	y.s.Policy.MaxAttempts = 1
	full := y.host("full", 1, true, "shell")
	busy := y.run("shell", &full.ID)
	if _, err := runs.New(y.s).ClaimAndOffer(t.Context(), y.fleet.Connected, 10, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := y.get(busy.ID); got.HostID == nil {
		t.Fatal("the first run was not placed")
	}
	starved := y.run("shell", &full.ID)
	nobody := y.run("codex", nil)
	if _, err := y.s.Pool.Exec(t.Context(), `UPDATE runs SET pending_since = now() - interval '1 hour' WHERE id = ANY($1::uuid[])`,
		[]string{starved.ID, nobody.ID}); err != nil {
		t.Fatal(err)
	}
	y.start(dispatch.Options{DispatchTimeout: time.Minute})
	y.waitPasses(1)
	for id, want := range map[string]string{starved.ID: wire.FailDispatchTimeout, nobody.ID: wire.FailNoEligibleHost} {
		got := y.get(id)
		if reason := ""; got.Status != wire.RunFailed || got.FailureReason == nil || *got.FailureReason != want {
			if got.FailureReason != nil {
				reason = *got.FailureReason
			}
			t.Errorf("run %s: %s %q, want failed %s", id, got.Status, reason, want)
		}
	}
}

// Issue 9 item 11: the dispatch timeout counts from pending_since whatever
// the offers. A connected host that takes every offer and never acks
// (each offer withdrawn at the ack timeout, then offered again) does not
// keep the run pending forever: it fails dispatch_timeout.
func TestDispatchTimeoutCountsWhateverTheOffers(t *testing.T) {
	t.Parallel()
	const ack, dispatchTimeout = 10 * time.Second, time.Minute
	y := newSys(t)
	y.manualClock()
	y.s.Policy.MaxAttempts = 1
	silent := y.host("silent", 4, true, "shell")
	r := y.run("shell", nil)
	y.start(dispatch.Options{AckTimeout: ack, DispatchTimeout: dispatchTimeout, Tick: 20 * time.Millisecond})
	// Five ack timeouts (55 s): each withdraws the offer and the next pass
	// offers the run again; the run stays pending.
	for i := range 5 {
		eventually.Wait(t, eventually.Medium, "an offer", func() bool { return len(sentOf[wire.RunDispatchFrame](y.fleet, silent.ID)) == i+1 })
		if got := y.get(r.ID); got.Status != wire.RunPending {
			t.Fatalf("%s within the dispatch timeout; events %v", got.Status, y.topics(r.ID))
		}
		y.advance(ack + time.Second)
	}
	y.advance(dispatchTimeout - 5*(ack+time.Second) + time.Second)
	eventually.Wait(t, eventually.Medium, "the run failed", func() bool { return y.get(r.ID).Status == wire.RunFailed })
	got := y.get(r.ID)
	if got.FailureReason == nil || *got.FailureReason != wire.FailDispatchTimeout {
		t.Errorf("failure reason %v, want dispatch_timeout", got.FailureReason)
	}
	if n := len(sentOf[wire.RunDispatchFrame](y.fleet, silent.ID)); n < 2 {
		t.Errorf("%d offers before the timeout, want it re-offered after each ack timeout", n)
	}
}

// Issue item "refused offers loop": a host that refuses an offer (full,
// or its provider binary gone) is not offered that run again for
// PAM_DISPATCH_ACK_TIMEOUT. The only host here refuses every offer at
// once and the server wakes the dispatcher on each refusal, as it does:
// the offers to it are spaced by the ack timeout, not made on every pass;
// and a host that comes up meanwhile gets the run at once.
func TestRefusedOfferNotReofferedWithinAckTimeout(t *testing.T) {
	t.Parallel()
	y := newSys(t)
	y.manualClock()
	const ack = 10 * time.Second
	h := y.host("refuses", 4, true, "shell")
	r := y.run("shell", nil)
	var d atomic.Pointer[dispatch.Dispatcher]
	var refusals atomic.Int64
	y.fleet.set(func(f *fakeFleet) {
		f.onSend = func(host string, fr wire.Frame) {
			offer, ok := fr.(wire.RunDispatchFrame)
			if host != h.ID || !ok {
				return
			}
			no := false
			res, err := runs.New(y.s).AckOffer(t.Context(), host, wire.RunDispatchAckFrame{RunID: offer.RunID, Attempt: offer.Attempt, Accepted: &no, Reason: "at capacity: 4 of 4 runs"})
			if err != nil {
				t.Errorf("refuse: %v", err)
				return
			}
			refusals.Add(1)
			if dd := d.Load(); res.Changed && dd != nil {
				dd.Wake() // as the server does on a withdrawal
			}
		}
	})
	d.Store(y.start(dispatch.Options{AckTimeout: ack, DispatchTimeout: time.Hour, Tick: 20 * time.Millisecond}))
	offers := func() int { return len(sentOf[wire.RunDispatchFrame](y.fleet, h.ID)) }
	// Each window: many passes within the ack timeout after the latest
	// refusal (each could have offered the run again) make no offer; the
	// first pass past it offers the run once more.
	for i := 1; i <= 3; i++ {
		eventually.Wait(t, eventually.Medium, "the refusal", func() bool { return refusals.Load() >= int64(i) })
		y.waitPasses(5)
		y.advance(ack - time.Second)
		y.waitPasses(5)
		if n := offers(); n != i {
			t.Fatalf("%d offers to the refusing host within the ack timeout after refusal %d, want %d; events %v", n, i, i, y.topics(r.ID))
		}
		y.advance(2 * time.Second)
		eventually.Wait(t, eventually.Medium, "the offer after the ack timeout", func() bool { return offers() == i+1 })
	}

	// A host able to take it gets it without waiting for the refusal to
	// age: the refusal keeps only the refusing host away.
	good := y.host("takes", 4, true, "shell")
	eventually.Wait(t, eventually.Medium, "the offer to the other host", func() bool {
		got := y.get(r.ID)
		return got.HostID != nil && *got.HostID == good.ID
	})
}
