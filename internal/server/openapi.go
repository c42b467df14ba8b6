package server

import (
	_ "embed"
	"net/http"
	"slices"
)

// openAPIDoc is the OpenAPI 3.1 document of /api/v1, the single source of
// the API's description: served at GET /api/v1/openapi.json, and checked
// by the tests against the routes registered here and against every
// response the server tests receive. docs/api.md is its guide.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPI serves GET /api/v1/openapi.json.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDoc)
}

// routeMux is the server's ServeMux, remembering every pattern registered
// on it in order, so that the routes actually served can be compared with
// the OpenAPI document without a hand-copied list that could drift.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func newRouteMux() *routeMux { return &routeMux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern and records the pattern.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers h for pattern and records the pattern.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

// Routes returns every pattern registered on the server's mux ("GET
// /api/v1/projects", the method-less fallbacks such as "/api/v1/"), in
// registration order. The tests read it to hold the OpenAPI document to
// what is really served.
func (s *Server) Routes() []string { return slices.Clone(s.mux.patterns) }
