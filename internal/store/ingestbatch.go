package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// SignalIn is one signal of a batch: the run it names, the host that
// sent it, and the signal.
type SignalIn struct {
	RunID  string
	Sender string
	Signal wire.Signal
	// Screen is the question the server last read on the run's screen
	// from Sender at the signal's attempt (lifecycle.SignalFacts.Screen);
	// nil when none.
	Screen *wire.AttentionDetail
	// ByToken: the signal came with the run's signal token, which is
	// refused once the run has ended SignalTokenTTL ago.
	ByToken bool
}

// SignalTokenTTL is how long after its run ended a signal token is
// still taken: a late hook or a spooled replay of a run that just ended
// is answered as the ingest table says; a token kept for days is refused
// (docs/architecture.md#bounded-journal).
const SignalTokenTTL = 24 * time.Hour

// tokenExpired refuses a signal token whose run ended more than
// SignalTokenTTL before now (401).
func tokenExpired(in SignalIn, r wire.Run, now time.Time) error {
	if !in.ByToken || runwrite.Active(r.Status) || r.FinishedAt == nil || now.Sub(*r.FinishedAt) < SignalTokenTTL {
		return nil
	}
	return wire.Errorf(wire.CodeUnauthorized, "this signal token's run ended more than %s ago", SignalTokenTTL)
}

// SignalOut is what became of one signal of a batch: what IngestSignal
// would have returned for it.
type SignalOut struct {
	Ingest
	Err error
}

// errCommit marks a batch whose commit failed: whether it took effect is
// not known, so its signals are answered with the error (the sender
// retries, and exactly-once makes the retry safe) rather than applied
// again one by one.
var errCommit = errors.New("commit the signal batch")

// IngestSignals applies signals in one transaction (group commit:
// docs/architecture.md#group-commit), in their order, each exactly as
// IngestSignal would: same guards, same writes, same answers. It reports
// whether they were committed together. A signal the ingest refuses (a
// stale token, an unknown run, an attempt from the future, a duplicate)
// writes nothing and leaves the others alone. A statement that fails
// aborts the transaction; then nothing of the batch was written, and each
// signal is applied again in its own transaction (IngestSignal), so one
// signal the database refuses fails alone. A failed commit answers every
// signal with its error.
func (s *Store) IngestSignals(ctx context.Context, decide SignalRule, in []SignalIn) (out []SignalOut, together bool) {
	in = slices.Clone(in) // run and host ids are made canonical here
	out = make([]SignalOut, len(in))
	live := make([]int, 0, len(in)) // the signals that need the database
	for i, sg := range in {
		if err := sg.Signal.Validate(); err != nil { // each signal of a group answers alone
			out[i].Err = err
			continue
		}
		run, errRun := uuid.Parse(sg.RunID)
		host, errHost := uuid.Parse(sg.Sender)
		if errRun != nil || errHost != nil {
			out[i].Err = wire.NotFound("run")
			continue
		}
		in[i].RunID, in[i].Sender = run.String(), host.String()
		live = append(live, i)
	}
	if len(live) == 0 {
		return out, true
	}
	err := s.ingestBatch(ctx, decide, in, live, out)
	if err == nil {
		return out, true
	}
	if errors.Is(err, errCommit) {
		for _, i := range live {
			out[i] = SignalOut{Err: translate(err)}
		}
		return out, true
	}
	for _, i := range live {
		res, err := s.ingestOne(ctx, decide, in[i])
		out[i] = SignalOut{Ingest: res, Err: err}
	}
	return out, false
}

// batchRun is what a batch knows of one of its runs between signals.
type batchRun struct {
	run wire.Run
	// seq is the progress seq the batch applied last (0: none yet);
	// unwritten says it is not recorded yet. The progress signals of a run
	// in a row record only the last seq, once (at the end of the batch, by
	// one statement for every run, or before the run's next other write):
	// now() is the transaction's time, so the row ends the same as with
	// one update per signal.
	seq       int64
	unwritten bool
	// The run's progress window as the batch left it (valid once seq >
	// 0): when run.progress was last journaled, how many were applied
	// since without one, and the newest of those (nil: none).
	journaledAt time.Time
	coalesced   int
	held        *string
	// reread: a signal of the batch wrote more than a progress seq (a
	// status, a processed or refused signal): the run and its facts are
	// read again before its next signal.
	reread bool
}

// recordSeq records the run's last progress seq and window if the
// batch has not.
func (st *batchRun) recordSeq(ctx context.Context, tx *Tx) error {
	if !st.unwritten {
		return nil
	}
	st.unwritten = false
	if err := tx.execLater(ctx, `UPDATE runs SET last_progress_seq = $2, progress_journaled_at = $3, progress_coalesced = $4,
		progress_held = $5::jsonb, updated_at = now() WHERE id = $1`, st.run.ID, st.seq, nullTime(st.journaledAt), st.coalesced, st.held); err != nil {
		return fmt.Errorf("record progress of run %s: %w", st.run.ID, err)
	}
	return nil
}

// progressApplied moves the batch's view of the run's progress window
// (f's, for the run's first progress of the batch) by one applied
// progress decision d made at now.
func (st *batchRun) progressApplied(d runwrite.Decision, f runwrite.SignalFacts, now time.Time) error {
	if st.seq == 0 {
		st.journaledAt, st.coalesced = f.ProgressJournaledAt, f.ProgressCoalesced
	}
	st.seq, st.unwritten = d.ProgressSeq, true
	if d.Progress == nil || d.Progress.Journaled {
		st.journaledAt, st.coalesced, st.held = now, 0, nil
		return nil
	}
	held, err := heldProgress(st.run, d.Progress.Held)
	if err != nil {
		return err
	}
	st.coalesced++
	st.held = &held
	return nil
}

// nullTime is t, or NULL when zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// signalFactsRow is the facts of one signal as the batch reads them.
type signalFactsRow struct {
	known bool
	facts runwrite.SignalFacts
}

// ingestBatch applies the live signals of in in one transaction, writing
// their outcomes into out. Round trips: one to begin, lock every run of
// the batch (in id order) and read every signal's facts; then only what a
// decision reads back (a status write's new row) or a run read again; one
// for the pipelined writes; one to commit.
func (s *Store) ingestBatch(ctx context.Context, decide SignalRule, in []SignalIn, live []int, out []SignalOut) error {
	ids := make([]string, 0, len(live))
	runIDs := make([]string, len(live))
	senders := make([]string, len(live))
	kinds := make([]string, len(live))
	attempts := make([]int32, len(live))
	for k, i := range live {
		sg := in[i]
		ids = append(ids, sg.RunID)
		runIDs[k], senders[k], kinds[k] = sg.RunID, sg.Sender, sg.Signal.Kind
		if sg.Signal.Attempt != nil {
			attempts[k] = int32(*sg.Signal.Attempt)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)

	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(`SELECT `+runColumns+` FROM runs WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE`, ids)
	// Read after every run is locked, by a statement of its own (a fresh
	// snapshot): a signal committed by another transaction while this
	// one waited for a lock is seen.
	b.Queue(`SELECT s.i::int,
		coalesce(s.sender = r.host_id, false) OR EXISTS (SELECT 1 FROM run_offers o WHERE o.run_id = s.run_id AND o.host_id = s.sender),
		r.last_progress_seq, r.progress_journaled_at, r.progress_coalesced,
		EXISTS (SELECT 1 FROM processed_signals p WHERE p.run_id = s.run_id AND p.attempt = r.attempt AND p.kind = s.kind),
		ARRAY(SELECT f.result FROM signal_refusals f WHERE f.run_id = s.run_id AND f.attempt = s.attempt AND f.kind = s.kind ORDER BY f.result)
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::int[]) WITH ORDINALITY AS s(run_id, sender, kind, attempt, i)
		JOIN runs r ON r.id = s.run_id`, runIDs, senders, kinds, attempts)
	br := s.Pool.SendBatch(ctx, b)
	ptx := br.Tx()
	defer func() { _ = ptx.Rollback(context.Background()) }() // nothing once committed
	runs, facts, err := readBatchStart(br, len(live))
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lock the runs of a signal batch: %w", err)
	}

	tx := &Tx{Tx: ptx, now: s.now()}
	tx.pipeline()
	for k, i := range live {
		sg := in[i]
		st := runs[sg.RunID]
		if st == nil {
			out[i].Err = wire.NotFound("run")
			continue
		}
		if err := s.batchSignal(ctx, tx, decide, sg, st, facts[k], int(attempts[k]), &out[i]); err != nil {
			return err
		}
	}
	if err := recordBatchSeqs(ctx, tx, ids, runs); err != nil {
		return err
	}
	if err := tx.flush(ctx); err != nil {
		return err // a write failed: nothing is committed
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%w: %w", errCommit, err)
	}
	if tx.Journaled && s.AfterCommit != nil {
		s.AfterCommit()
	}
	return nil
}

// batchSignal decides and applies one signal sg of a batch about the run
// st (locked), with the facts f read for it (read again first when the
// batch already wrote more than a progress seq of the run), writing its
// outcome into out. An error aborts the batch; a refusal is out's.
func (s *Store) batchSignal(ctx context.Context, tx *Tx, decide SignalRule, sg SignalIn, st *batchRun, f signalFactsRow, attempt int, out *SignalOut) error {
	if st.reread {
		if err := st.recordSeq(ctx, tx); err != nil {
			return err
		}
		r, err := runByID(ctx, tx, sg.RunID, true)
		if err != nil {
			return err
		}
		if f.known, err = senderKnown(ctx, tx, sg.RunID, sg.Sender); err != nil {
			return err
		}
		if f.facts, err = signalFacts(ctx, tx, r, attempt, sg.Signal.Kind); err != nil {
			return err
		}
		*st = batchRun{run: r}
	} else if st.seq > 0 {
		f.facts.LastProgressSeq = st.seq
		f.facts.ProgressJournaledAt, f.facts.ProgressCoalesced = st.journaledAt, st.coalesced
	}
	if !f.known {
		out.Err = wire.NotFound("run")
		return nil
	}
	now := s.now()
	if err := tokenExpired(sg, st.run, now); err != nil {
		out.Err = err
		return nil
	}
	f.facts.Screen = sg.Screen
	d, err := decide(st.run, sg.Sender, sg.Signal, f.facts, now)
	if err != nil {
		out.Err = err // refused: nothing written
		return nil
	}
	only := progressOnly(d)
	if only {
		if err := st.progressApplied(d, f.facts, now); err != nil {
			return err
		}
		d.ProgressSeq = 0 // recorded once for the run (recordSeq)
	} else if writes(d) {
		if err := st.recordSeq(ctx, tx); err != nil {
			return err
		}
		st.reread = true
	}
	r, err := s.apply(ctx, tx, st.run, d)
	if err != nil {
		return err
	}
	out.Ingest = Ingest{Result: d.Result, Run: r, StopSender: d.StopSender, StatusChange: d.Changed()}
	st.run = r
	return nil
}

// recordBatchSeqs records the progress seqs and windows the batch left
// unwritten, one statement for all the runs.
func recordBatchSeqs(ctx context.Context, tx *Tx, ids []string, runs map[string]*batchRun) error {
	var seqRuns []string
	var seqs []int64
	var ats []*time.Time
	var counts []int32
	var helds []*string
	for _, id := range ids {
		if st := runs[id]; st != nil && st.unwritten {
			seqRuns, seqs = append(seqRuns, id), append(seqs, st.seq)
			ats, counts, helds = append(ats, nullTime(st.journaledAt)), append(counts, int32(st.coalesced)), append(helds, st.held)
		}
	}
	if len(seqRuns) > 0 {
		if err := tx.execLater(ctx, `UPDATE runs SET last_progress_seq = v.seq, progress_journaled_at = v.at, progress_coalesced = v.n,
			progress_held = v.held::jsonb, updated_at = now()
			FROM unnest($1::uuid[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[]) AS v(id, seq, at, n, held) WHERE runs.id = v.id`,
			seqRuns, seqs, ats, counts, helds); err != nil {
			return fmt.Errorf("record the progress of a signal batch: %w", err)
		}
	}
	return nil
}

// readBatchStart reads the results of a batch's first round trip: the
// begin, the locked runs by id, and each live signal's facts (by its
// index among the live ones).
func readBatchStart(br pgx.BatchResults, n int) (map[string]*batchRun, []signalFactsRow, error) {
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	runs := map[string]*batchRun{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			rows.Close()
			return nil, nil, err
		}
		runs[r.ID] = &batchRun{run: r}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	facts := make([]signalFactsRow, n)
	rows, err = br.Query()
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var k int
		var f signalFactsRow
		var at *time.Time
		if err := rows.Scan(&k, &f.known, &f.facts.LastProgressSeq, &at, &f.facts.ProgressCoalesced, &f.facts.Processed, &f.facts.Refused); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if at != nil {
			f.facts.ProgressJournaledAt = *at
		}
		facts[k-1] = f
	}
	return runs, facts, rows.Err()
}

// progressOnly: d applies a progress seq and journals it, and writes
// nothing else, so the run's next signal in the batch needs no new read:
// only its last progress seq moved.
func progressOnly(d runwrite.Decision) bool {
	if d.ProgressSeq == 0 || d.Processed != "" || d.Refusal != nil || d.CompleteSource != "" {
		return false
	}
	for _, st := range d.Steps {
		if st.Write != runwrite.JournalOnly {
			return false
		}
	}
	return true
}

// writes: d writes anything at all.
func writes(d runwrite.Decision) bool {
	return d.ProgressSeq != 0 || d.Processed != "" || d.Refusal != nil || d.CompleteSource != "" || len(d.Steps) > 0
}
