package server

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"pam/internal/store"
	"pam/internal/wire"
)

// pam's tools for the agent (docs/architecture.md#pams-tools-for-the-agent):
// the internal routes `pam mcp` calls for the run in whose environment it
// runs, with that run's signal token and nothing else. They reach the
// run's project only, only while the run is live, at most
// wire.AgentCallsPerMinute calls a minute per run.

// agentHandler serves one call of a tool for the run of sc.
type agentHandler func(w http.ResponseWriter, r *http.Request, sc store.AgentScope)

func (s *Server) agentRoutes() {
	route := func(pattern string, h agentHandler) {
		method, path, _ := strings.Cut(pattern, " ")
		s.mux.Handle(method+" /api/internal/runs/{id}"+path, s.agentAuth(h))
	}
	route("GET /work-items", s.agentListItems)
	route("POST /work-items", s.agentCreateItem)
	route("GET /work-items/{item}", s.agentGetItem)
	route("PATCH /work-items/{item}", s.agentUpdateItem)
	route("POST /progress", s.agentProgress)
}

// agentAuth admits a call bearing the signal token of the run in the
// path (a worker's or the operator's token is refused: 401), counts it
// against the run's calls of the last minute (429 rate_limited past
// them), and hands the handler the run's scope once the run is known to
// be live at the token's attempt and host (store.AgentScope).
func (s *Server) agentAuth(h agentHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runID := r.PathValue("id")
		hostID, attempt, err := s.verifySignalToken(r.Context(), runID, bearer(r))
		if err != nil {
			if !wire.HasCode(err, wire.CodeUnauthorized) && s.lookupFailed(r, err) {
				writeError(w, store.ErrUnavailable)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="pam-run"`)
			writeError(w, wire.Errorf(wire.CodeUnauthorized, "missing or invalid signal token: pam's tools take the signal token of the run they act for"))
			return
		}
		if ok, wait := s.agentCalls.take(runID, time.Now()); !ok {
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeError(w, wire.Errorf(wire.CodeRateLimited, "this run made %d calls of pam's tools within the last minute, the most it may; try again in %d s",
				wire.AgentCallsPerMinute, secs).With("retry_after_seconds", secs))
			return
		}
		sc, err := s.store.AgentScope(r.Context(), runID, hostID, attempt)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r, sc)
	})
}

func (s *Server) agentListItems(w http.ResponseWriter, r *http.Request, sc store.AgentScope) {
	q := r.URL.Query()
	for k := range q {
		if k != "status" {
			s.fail(w, r, wire.Invalid(k, "unknown query parameter %s (this route takes status)", k))
			return
		}
	}
	if err := wire.ValidateItemFilter(q.Get("status"), "", ""); err != nil {
		s.fail(w, r, err)
		return
	}
	items, err := s.store.AgentWorkItems(r.Context(), sc, q.Get("status"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.WorkItemList{WorkItems: items})
}

func (s *Server) agentGetItem(w http.ResponseWriter, r *http.Request, sc store.AgentScope) {
	item, err := s.store.AgentWorkItem(r.Context(), sc, r.PathValue("item"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, item)
}

func (s *Server) agentCreateItem(w http.ResponseWriter, r *http.Request, sc store.AgentScope) {
	var in wire.AgentCreateWorkItem
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	item, err := s.store.AgentCreateWorkItem(r.Context(), sc, in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, item)
}

func (s *Server) agentUpdateItem(w http.ResponseWriter, r *http.Request, sc store.AgentScope) {
	var in wire.AgentUpdateWorkItem
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	item, err := s.store.AgentUpdateWorkItem(r.Context(), sc, r.PathValue("item"), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, item)
}

func (s *Server) agentProgress(w http.ResponseWriter, r *http.Request, sc store.AgentScope) {
	var in wire.AgentProgress
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.store.AgentProgress(r.Context(), sc, in.Text); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, wire.SignalResult{Result: wire.ResultApplied})
}

// agentRunsTracked bounds how many runs' recent calls the server keeps: a
// run pushed out by more than this many others calling at once starts
// counting again (a bound on memory, not on any one run).
const agentRunsTracked = 4096

// callWindow counts the calls of pam's tools per run over a sliding
// minute: a call is taken when the run made fewer than
// wire.AgentCallsPerMinute in the minute before it. One serve is active
// per database (docs/architecture.md#single-active-server), so the count
// is the fleet's.
type callWindow struct {
	mu   sync.Mutex
	runs *simplelru.LRU[string, []time.Time] // each run's calls of the last minute, oldest first
}

func newCallWindow() *callWindow {
	runs, err := simplelru.NewLRU[string, []time.Time](agentRunsTracked, nil)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &callWindow{runs: runs}
}

// take counts a call of runID at now, or, when the run has had its
// calls for the minute, refuses it and says how long until one is free.
func (c *callWindow) take(runID string, now time.Time) (ok bool, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls, _ := c.runs.Get(runID)
	i := 0
	for i < len(calls) && now.Sub(calls[i]) >= time.Minute {
		i++
	}
	calls = calls[i:]
	if len(calls) >= wire.AgentCallsPerMinute {
		c.runs.Add(runID, calls)
		return false, calls[0].Add(time.Minute).Sub(now)
	}
	c.runs.Add(runID, append(calls, now))
	return true, 0
}
