package server

import (
	"net/http"
	"strconv"
	"strings"

	"pam/internal/wire"
)

// cursor reads the resume position: Last-Event-ID wins over ?after=. ok
// is false when the request names none (GET /events then reads from the
// oldest retained event; the stream starts live).
func cursor(r *http.Request) (after int64, ok bool, err error) {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	field := "Last-Event-ID"
	if v == "" {
		v, field = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, wire.Invalid(field, "%s must be a non-negative event seq", field)
	}
	return n, true, nil
}

func topicPattern(r *http.Request) (*wire.TopicPattern, error) {
	p, err := wire.ParseTopicGlob(r.URL.Query().Get("topic"))
	if err != nil {
		return nil, wire.Invalid("topic", "%v", err)
	}
	return p, nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	after, _, err := cursor(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	pattern, err := topicPattern(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		limit, err = strconv.Atoi(v)
		if err != nil || limit < 1 || limit > 1000 {
			s.fail(w, r, wire.Invalid("limit", "limit must be between 1 and 1000"))
			return
		}
	}
	safe, err := s.safeSeq(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	evs, err := s.store.EventsAfter(r.Context(), after, safe, pattern, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.EventList{Events: evs})
}

// streamEvents serves the SSE stream (docs/api.md#server-sent-events):
// from a cursor (?after= or Last-Event-ID; 0 = the whole retained
// history) every later event, then live; without one, live only — the
// events committed after the connection. A client that wants what
// happened before loads state first and streams from its Pam-Event-Seq.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	after, ok, err := cursor(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		after = LiveOnly
	}
	pattern, err := topicPattern(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.opts.Events == nil {
		s.fail(w, r, wire.Errorf(wire.CodeUnavailable, "event stream not running"))
		return
	}
	// Streams end on client hang-up or when the server shuts down.
	ctx, cancel := contextWithCancelOn(r.Context(), s.streamCtx)
	defer cancel()
	s.opts.Events.ServeSSE(w, r.WithContext(ctx), after, pattern)
}
