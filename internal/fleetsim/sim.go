package fleetsim

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"pam/internal/wire"
)

// sim is the shared state of one simulation: what the hosts' workers
// and fake sessions report, counted.
type sim struct {
	o    Options
	base string // serve's URL (the port is kept across the restart)

	snapshotsSent                   atomic.Int64
	refusals                        atomic.Int64
	startedApplied, finishedApplied atomic.Int64
	// restarting is set while serve is stopped and the fleet comes back:
	// the workers' warnings then are the restart's, counted apart.
	restarting atomic.Bool

	mu         sync.Mutex
	measureHB  bool
	hbAck      []time.Duration
	admitted   map[*simHost]time.Time // latest admission of each host's worker
	dispatched map[string]*dispatchNote
	anomalies  map[string]int64
	errs       []string
}

func newSim(o Options, base string) *sim {
	return &sim{o: o, base: base, admitted: map[*simHost]time.Time{}, dispatched: map[string]*dispatchNote{}, anomalies: map[string]int64{}}
}

// dispatchNote is what the workers saw of one run's offers.
type dispatchNote struct {
	first      time.Time
	hosts      []string
	maxAttempt int
}

const maxErrors = 20

func (s *sim) noteErr(what, err string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < maxErrors {
		s.errs = append(s.errs, what+": "+err)
	}
}

func (s *sim) count(key string) {
	s.mu.Lock()
	s.anomalies[key]++
	s.mu.Unlock()
}

// noteWarning counts a warning a worker logged, by its message; one
// logged while serve restarts is counted apart, as the restart's.
func (s *sim) noteWarning(msg, err string) {
	if s.restarting.Load() {
		s.count("while serve restarted: " + msg)
		return
	}
	s.count("worker: " + msg)
	if err != "" {
		s.noteErr(msg, err)
	}
}

func (s *sim) noteAdmitted(h *simHost, at time.Time) {
	s.mu.Lock()
	s.admitted[h] = at
	s.mu.Unlock()
}

// admittedSince counts hosts whose worker was admitted at or after t.
func (s *sim) admittedSince(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, at := range s.admitted {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

func (s *sim) heartbeatAcked(d time.Duration) {
	s.mu.Lock()
	if s.measureHB {
		s.hbAck = append(s.hbAck, d)
	}
	s.mu.Unlock()
}

// measureHeartbeats starts (on) or ends collecting heartbeat acks and
// returns those collected.
func (s *sim) measureHeartbeats(on bool) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.hbAck
	s.measureHB, s.hbAck = on, nil
	return got
}

func (s *sim) noteDispatch(runID, hostID string, attempt int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.dispatched[runID]
	if n == nil {
		n = &dispatchNote{first: at}
		s.dispatched[runID] = n
	}
	if !slices.Contains(n.hosts, hostID) {
		n.hosts = append(n.hosts, hostID)
	}
	n.maxAttempt = max(n.maxAttempt, attempt)
}

// signalResult counts one signal's answer: result for an answer, code
// for a refusal or a failure to deliver. A duplicate is a signal applied
// by an earlier try whose answer was lost (the wrapper's sender retries
// after 3 s): the run has it, and the retry is counted apart.
func (s *sim) signalResult(kind, result, code string) {
	if code == "" && (result == wire.ResultApplied || result == wire.ResultDuplicate) {
		switch kind {
		case wire.SignalStarted:
			s.startedApplied.Add(1)
		case wire.SignalFinished:
			s.finishedApplied.Add(1)
		}
		if result == wire.ResultApplied {
			return
		}
	}
	key := "signal " + kind + " " + result
	if result == wire.ResultDuplicate {
		key += " (retried after a lost answer)"
	}
	if code != "" {
		key = "signal " + kind + " " + code
	}
	s.count(key)
}

// report copies the counters into res.
func (s *sim) report(res *Result) {
	res.SnapshotsSent = s.snapshotsSent.Load()
	s.mu.Lock()
	res.Anomalies = maps.Clone(s.anomalies)
	res.Errors = slices.Clone(s.errs)
	s.mu.Unlock()
	if n := s.refusals.Load(); n > 0 {
		res.Anomalies["refused offers"] = n
	}
}
