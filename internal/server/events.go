package server

import (
	"net/http"
	"strconv"
	"strings"

	"pam/internal/wire"
)

// cursor reads the resume position: Last-Event-ID wins over ?after=.
func cursor(r *http.Request) (int64, error) {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	field := "Last-Event-ID"
	if v == "" {
		v, field = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, wire.Invalid(field, "%s must be a non-negative event seq", field)
	}
	return n, nil
}

func topicPattern(r *http.Request) (*wire.TopicPattern, error) {
	p, err := wire.ParseTopicGlob(r.URL.Query().Get("topic"))
	if err != nil {
		return nil, wire.Invalid("topic", "%v", err)
	}
	return p, nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	after, err := cursor(r)
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
	safe, err := s.store.SafeSeq(r.Context())
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

func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	after, err := cursor(r)
	if err != nil {
		s.fail(w, r, err)
		return
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
