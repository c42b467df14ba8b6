package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// Group commit (docs/architecture.md#group-commit), seen from outside:
// through the server's metrics and the database.

// metric reads a metric of the server's registry: a counter's or a
// gauge's value, or a histogram's sample count (and its sum as second).
func (e *runEnv) metric(name string) (float64, float64) {
	e.t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), 0
		default:
			return m.GetGauge().GetValue(), 0
		}
	}
	e.t.Fatalf("no metric %s", name)
	return 0, 0
}

// waitWaiting waits until n signals are queued for or in a commit.
func (e *runEnv) waitWaiting(n int) {
	e.t.Helper()
	eventually.Wait(e.t, eventually.Medium, fmt.Sprintf("%d signals waiting for a commit", n), func() bool {
		v, _ := e.metric("pam_signals_waiting")
		return int(v) == n
	})
}

// waitBlocked waits until a backend of the test's database waits for a
// lock of the type given (a row lock: "Lock/tuple" or "Lock/transactionid";
// an advisory lock: "Lock/advisory") and returns its pid.
func (e *runEnv) waitBlocked(what string, events ...string) int {
	e.t.Helper()
	var pid int
	eventually.Wait(e.t, eventually.Medium, "a batch blocked on "+what, func() bool {
		err := e.store.Pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type || '/' || wait_event = ANY($1) LIMIT 1`, events).Scan(&pid)
		return err == nil
	})
	return pid
}

// answer is one signal's answer, from either transport.
type answer struct {
	code   int // HTTP status, or 0 for an uplink ack
	result string
	err    string // the error code, if refused
}

// postAsync posts a signal over HTTP in the background and waits until
// the batcher holds waiting signals, so signals queue in a known order.
func (e *runEnv) postAsync(token, runID string, body any, waiting int) <-chan answer {
	e.t.Helper()
	ch := make(chan answer, 1)
	go func() {
		code, res, out := e.signal(token, runID, body)
		a := answer{code: code, result: res.Result}
		if code >= 400 {
			var env struct{ Error wire.Error }
			_ = json.Unmarshal(out, &env)
			a.err = env.Error.Code
		}
		ch <- a
	}()
	e.waitWaiting(waiting)
	return ch
}

func (w *fakeWorker) progress(runID string, attempt int, seq int64, payload string) {
	w.send(wire.SignalFrame{RunID: runID, Kind: wire.SignalProgress, Attempt: wire.IntPtr(attempt),
		Seq: ptr(seq), Source: wire.SourceWrapper, Payload: json.RawMessage(payload)})
}

// holdRow locks a run's row in a transaction of the test's own, so that
// the batch that needs it waits; release ends it.
func (e *runEnv) holdRow(runID string) (release func()) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.store.Pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, runID); err != nil {
		e.t.Fatal(err)
	}
	return func() { _ = tx.Commit(ctx) }
}

// runWithToken is a running run and the signal token of its attempt.
type runWithToken struct {
	wire.Run
	token string
}

func (e *runEnv) runningWithToken(w *fakeWorker) runWithToken {
	e.t.Helper()
	r := e.start(map[string]any{"host_id": w.hostID})
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	if code, _, body := e.signal(d.SignalToken, r.ID, sig(wire.SignalStarted, 1)); code != 202 {
		e.t.Fatalf("started: %d %s", code, body)
	}
	return runWithToken{Run: e.run(r.ID), token: d.SignalToken}
}

// TestSignalGroupCommitBatches: signals that arrive while a batch commits
// are committed together in the next one, whichever transport brought
// them — 17 signals, 2 transactions — and each is answered applied.
func TestSignalGroupCommitBatches(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{signalLanes: 1})
	w := e.worker("batch-host", 20, "shell")
	var runs []runWithToken
	for range 17 {
		runs = append(runs, e.runningWithToken(w))
	}
	batches0, sum0 := e.metric("pam_signal_batch_size")

	// The first signal's batch waits for a row lock the test holds; the
	// sixteen sent meanwhile, eight over HTTP and eight over the uplink,
	// queue behind it.
	release := e.holdRow(runs[0].ID)
	first := e.postAsync(runs[0].token, runs[0].ID, sig(wire.SignalProgress, 1, "seq", 1), 1)
	e.waitBlocked("the held row", "Lock/tuple", "Lock/transactionid")
	var posted []<-chan answer
	for i, r := range runs[1:9] {
		posted = append(posted, e.postAsync(r.token, r.ID, sig(wire.SignalProgress, 1, "seq", 1), 2+i))
	}
	for _, r := range runs[9:] {
		w.progress(r.ID, 1, 1, `{}`)
	}
	e.waitWaiting(17)
	release()

	for i, ch := range append([]<-chan answer{first}, posted...) {
		if a := <-ch; a.code != 202 || a.result != wire.ResultApplied {
			t.Errorf("HTTP signal %d: %+v, want 202 applied", i, a)
		}
	}
	for range runs[9:] {
		if ack := w.expect(wire.FrameSignalAck); ack.Result != wire.ResultApplied {
			t.Errorf("uplink ack %+v, want applied", ack)
		}
	}
	batches, sum := e.metric("pam_signal_batch_size")
	if batches-batches0 != 2 || sum-sum0 != 17 {
		t.Errorf("17 signals in %v transactions (%v signals counted), want 2: the one that waited, then the 16 queued behind it",
			batches-batches0, sum-sum0)
	}
	for _, r := range runs {
		if n := e.countEvents(r.ID, wire.TopicRunProgress); n != 1 {
			t.Errorf("run %s: %d run.progress events, want 1", r.ID, n)
		}
	}
}

// countEvents counts a run's events of a topic.
func (e *runEnv) countEvents(runID string, topic wire.Topic) int {
	e.t.Helper()
	var n int
	if err := e.store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE run_id = $1 AND topic = $2`,
		runID, topic).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestSignalBatchIsolatesFailures: in one batch, the signals the ingest
// refuses (out of order, an attempt from the future, an unknown run, an
// old attempt's token, a duplicate) get their own answers and the others
// are applied, in one transaction; a signal the database itself refuses
// (a trigger made to fail on it) fails alone: the batch is rolled back
// and applied again one signal per transaction, and every other signal
// gets the answer it would have got alone.
func TestSignalBatchIsolatesFailures(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{signalLanes: 1})
	w := e.worker("iso-host", 20, "shell")
	blocker, b, c, dup, fin := e.runningWithToken(w), e.runningWithToken(w), e.runningWithToken(w), e.runningWithToken(w), e.runningWithToken(w)
	// A run whose attempt 1 failed: attempt 1's token is now stale.
	old := e.runningWithToken(w)
	if code, _, body := e.signal(old.token, old.ID, sig(wire.SignalFinished, 1, "payload", map[string]any{"exit_code": 1})); code != 202 {
		t.Fatalf("finished 1: %d %s", code, body)
	}
	w.ack(w.expect(wire.FrameRunDispatch), true) // attempt 2
	if _, err := e.store.Pool.Exec(context.Background(), `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'poisoned signal'; END $$;
		CREATE TRIGGER poison BEFORE INSERT ON events FOR EACH ROW
		WHEN (NEW.payload->'payload'->>'poison' = 'yes') EXECUTE FUNCTION poison()`); err != nil {
		t.Fatal(err)
	}
	unknown := "0b5e3f5c-58c1-4f0e-9d1a-3f7f5f0c9a11"

	// round queues one batch behind a held row and returns the answers,
	// in the order the signals were queued.
	round := func(seq int64, poison bool) []answer {
		t.Helper()
		release := e.holdRow(blocker.ID)
		first := e.postAsync(blocker.token, blocker.ID, sig(wire.SignalProgress, 1, "seq", seq), 1)
		e.waitBlocked("the held row", "Lock/tuple", "Lock/transactionid")
		var chs []<-chan answer
		post := func(token, runID string, body any) {
			chs = append(chs, e.postAsync(token, runID, body, len(chs)+2))
		}
		post(b.token, b.ID, sig(wire.SignalProgress, 1, "seq", seq+5))
		post(b.token, b.ID, sig(wire.SignalProgress, 1, "seq", seq+3)) // after seq+5: out of order
		payload := map[string]any{"poison": "no"}
		if poison {
			payload["poison"] = "yes"
		}
		post(c.token, c.ID, sig(wire.SignalProgress, 1, "seq", seq, "payload", payload))
		post(w.token, unknown, sig(wire.SignalProgress, 1, "seq", seq))    // a run that does not exist
		post(old.token, old.ID, sig(wire.SignalProgress, 1, "seq", seq))   // the old attempt's token
		post(dup.token, dup.ID, sig(wire.SignalStarted, 1))                // started twice
		post(w.token, fin.ID, sig(wire.SignalProgress, 2, "seq", seq))     // attempt 2 of a run at 1
		post(fin.token, fin.ID, sig(wire.SignalProgress, 1, "seq", seq+1)) // then fine
		w.progress(b.ID, 1, seq+6, `{}`)                                   // the uplink joins the batch
		e.waitWaiting(len(chs) + 2)
		release()
		out := []answer{<-first}
		for _, ch := range chs {
			out = append(out, <-ch)
		}
		ack := w.expect(wire.FrameSignalAck)
		return append(out, answer{result: ack.Result, err: ack.Code})
	}
	want := func(poisoned bool) []answer {
		c := answer{code: 202, result: wire.ResultApplied}
		if poisoned {
			c = answer{code: 500, err: wire.CodeInternal}
		}
		return []answer{
			{code: 202, result: wire.ResultApplied},
			{code: 202, result: wire.ResultApplied},
			{code: 200, result: wire.ResultOutOfOrder},
			c,
			{code: 404, err: wire.CodeNotFound},
			{code: 200, result: wire.ResultStaleAttempt},
			{code: 200, result: wire.ResultDuplicate},
			{code: 409, err: wire.CodeInvalidAttempt},
			{code: 202, result: wire.ResultApplied},
			{result: wire.ResultApplied},
		}
	}
	check := func(name string, got, want []answer) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got  %v\n want %v", name, got, want)
		}
	}

	batches0, _ := e.metric("pam_signal_batch_size")
	check("refusals in one batch", round(10, false), want(false))
	if n, _ := e.metric("pam_signal_batch_splits_total"); n != 0 {
		t.Errorf("a batch of refusals was split: %v", n)
	}
	if n, _ := e.metric("pam_signal_batch_size"); n-batches0 != 2 {
		t.Errorf("%v transactions, want 2 (the blocked one, then the batch)", n-batches0)
	}
	// run.progress is journaled at most once a second per run: the
	// progress held back in round one is journaled by the trailing flush,
	// and then every run's window is passed (in the database), so that
	// round two's first progress of each run is journaled at once and the
	// poisoned one meets its trigger.
	eventually.Wait(t, eventually.Medium, "round one's held progress journaled", func() bool {
		return e.countEvents(b.ID, wire.TopicRunProgress) == 2
	})
	if _, err := e.store.Pool.Exec(context.Background(), `UPDATE runs SET progress_journaled_at = NULL`); err != nil {
		t.Fatal(err)
	}
	check("a signal the database refuses", round(100, true), want(true))
	if n, _ := e.metric("pam_signal_batch_splits_total"); n != 1 {
		t.Errorf("%v batches split, want 1", n)
	}

	// What is written is what one transaction per signal would have
	// written: every applied seq journaled once, the poisoned one not.
	// (The last of each round by the trailing flush.)
	var seqs []int64
	eventually.Wait(t, eventually.Medium, "round two's held progress journaled", func() bool {
		if err := e.store.Pool.QueryRow(context.Background(), `SELECT array_agg((payload->>'seq')::bigint ORDER BY seq)
			FROM events WHERE run_id = $1 AND topic = 'run.progress'`, b.ID).Scan(&seqs); err != nil {
			t.Fatal(err)
		}
		return len(seqs) >= 4
	})
	if fmt.Sprint(seqs) != "[15 16 105 106]" {
		t.Errorf("run.progress seqs of b: %v, want [15 16 105 106]", seqs)
	}
	if n := e.countEvents(c.ID, wire.TopicRunProgress); n != 1 {
		t.Errorf("c: %d run.progress events, want 1 (the poisoned one rolled back)", n)
	}
	if n := e.countEvents(old.ID, wire.TopicRunStaleSignal); n != 1 {
		t.Errorf("old: %d run.stale_signal events, want 1 (bounded)", n)
	}
	if got := e.run(fin.ID); got.Status != wire.RunRunning {
		t.Errorf("fin: %s", got.Status)
	}
}

// TestSignalAckAfterCommit: a signal is answered only once the
// transaction that applied it has committed. Commits are held (a
// deferred trigger waits for an advisory lock the test holds) and the
// database connection of the held batch is killed: none of its signals
// is answered applied, and none is written; sent again, as a spool
// replays them, each is applied exactly once.
func TestSignalAckAfterCommit(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{signalLanes: 1})
	w := e.worker("kill-host", 20, "shell")
	var runs []runWithToken
	for range 9 {
		runs = append(runs, e.runningWithToken(w))
	}
	ctx := context.Background()
	if _, err := e.store.Pool.Exec(ctx, `CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
		WHEN (NEW.topic = 'run.progress' AND (NEW.payload->>'seq')::bigint = 1000) EXECUTE FUNCTION hold_commit()`); err != nil {
		t.Fatal(err)
	}
	holder, err := pgxpool.New(ctx, e.store.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	hold, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	if _, err := hold.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}

	send := func() []<-chan answer {
		t.Helper()
		first := e.postAsync(runs[0].token, runs[0].ID, sig(wire.SignalProgress, 1, "seq", 1000), 1)
		pid := e.waitBlocked("its commit", "Lock/advisory")
		chs := []<-chan answer{first}
		for i, r := range runs[1:5] {
			chs = append(chs, e.postAsync(r.token, r.ID, sig(wire.SignalProgress, 1, "seq", 1000), 2+i))
		}
		for _, r := range runs[5:] {
			w.progress(r.ID, 1, 1000, `{}`)
		}
		e.waitWaiting(len(runs))
		// Kill the first batch at its commit, then the second, which
		// holds the other eight.
		kill := func(pid int) {
			if _, err := holder.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
		}
		kill(pid)
		eventually.Wait(t, eventually.Medium, "the second batch at its commit", func() bool {
			var p int
			err := e.store.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
				AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND pid <> $1 LIMIT 1`, pid).Scan(&p)
			if err == nil {
				kill(p)
			}
			return err == nil
		})
		return chs
	}
	chs := send()
	var answers []answer
	for _, ch := range chs {
		answers = append(answers, <-ch)
	}
	for range runs[5:] {
		ack := w.expect(wire.FrameSignalAck)
		answers = append(answers, answer{result: ack.Result, err: ack.Code})
	}
	for i, a := range answers {
		if a.result == wire.ResultApplied || a.code == 202 {
			t.Errorf("signal %d answered %+v although its transaction was killed at its commit", i, a)
		}
	}
	for _, r := range runs {
		if n := e.countEvents(r.ID, wire.TopicRunProgress); n != 0 {
			t.Errorf("run %s: %d run.progress events of a killed transaction", r.ID, n)
		}
	}

	// Sent again with the commits free: each applied, once.
	if _, err := hold.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		if i < 5 {
			if code, res, body := e.signal(r.token, r.ID, sig(wire.SignalProgress, 1, "seq", 1000)); code != 202 || res.Result != wire.ResultApplied {
				t.Errorf("again: %d %s", code, body)
			}
			continue
		}
		w.progress(r.ID, 1, 1000, `{}`)
		if ack := w.expect(wire.FrameSignalAck); ack.Result != wire.ResultApplied {
			t.Errorf("again over the uplink: %+v", ack)
		}
	}
	for _, r := range runs {
		if n := e.countEvents(r.ID, wire.TopicRunProgress); n != 1 {
			t.Errorf("run %s: %d run.progress events, want 1", r.ID, n)
		}
	}
}

// TestUplinkSignalsInOrder: an uplink's signals are acked as they commit
// while the next frames are read, yet each run's are applied in the order
// sent (300 pipelined progress signals of three runs, every one applied),
// and a frame that is not a signal takes effect after the signals sent
// before it: a finished held behind another run's batch, then a
// session_lost of the same run — the run exits, the late report changes
// nothing.
func TestUplinkSignalsInOrder(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{signalLanes: 1})
	w := e.worker("order-host", 8, "shell")
	runs := []runWithToken{e.runningWithToken(w), e.runningWithToken(w), e.runningWithToken(w)}
	for i := range 300 {
		w.progress(runs[i%3].ID, 1, int64(1+i/3), `{}`)
	}
	last := map[string]int64{}
	for range 300 {
		ack := w.expect(wire.FrameSignalAck)
		if ack.Result != wire.ResultApplied || *ack.Seq <= last[ack.RunID] {
			t.Fatalf("ack %s seq %d after %d: %s %s", ack.RunID, *ack.Seq, last[ack.RunID], ack.Result, ack.Code)
		}
		last[ack.RunID] = *ack.Seq
	}

	x := e.start(map[string]any{"host_id": w.hostID, "max_attempts": 1})
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(x.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	release := e.holdRow(runs[0].ID)
	blocked := e.postAsync(runs[0].token, runs[0].ID, sig(wire.SignalProgress, 1, "seq", 1000), 1)
	e.waitBlocked("the held row", "Lock/tuple", "Lock/transactionid")
	w.send(wire.SignalFrame{RunID: x.ID, Kind: wire.SignalFinished, Attempt: wire.IntPtr(1), Source: wire.SourceWrapper,
		Payload: json.RawMessage(`{"exit_code":0}`)})
	e.waitWaiting(2)
	w.send(wire.RunStateFrame{RunID: x.ID, Attempt: wire.IntPtr(1), State: wire.StateSessionLost, Detail: "gone"})
	w.progress(x.ID, 1, 1, `{}`) // answered only once the report before it was handled
	release()
	if a := <-blocked; a.code != 202 {
		t.Errorf("held signal: %+v", a)
	}
	for _, want := range []string{wire.SignalFinished, wire.SignalProgress} {
		if ack := w.expect(wire.FrameSignalAck); ack.Kind != want || ack.Result != wire.ResultApplied {
			t.Errorf("ack %+v, want %s applied", ack, want)
		}
	}
	if got := e.run(x.ID); got.Status != wire.RunExited {
		t.Errorf("after finished then session_lost: %s (%v), want exited", got.Status, got.FailureReason)
	}
}
