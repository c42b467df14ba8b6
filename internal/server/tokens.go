package server

import (
	"net/http"

	"pam/internal/wire"
)

// The named tokens' routes (docs/api.md#tokens-and-roles): admin only,
// except GET /tokens/self, which tells any token its own name and role
// (how the dashboard knows what to show).

func (s *Server) tokenRoutes(api func(pattern string, h http.HandlerFunc)) {
	api("GET /tokens", s.listTokens)
	api("POST /tokens", s.createToken)
	api("GET /tokens/self", s.selfToken)
	api("POST /tokens/{id}/rotate", s.rotateAPIToken)
	api("DELETE /tokens/{id}", s.revokeAPIToken)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := s.store.ListTokens(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.TokenList{Tokens: ts})
}

func (s *Server) selfToken(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, tokenOf(r.Context()).Token)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var in wire.CreateToken
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.store.CreateToken(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, out)
}

// rotateAPIToken gives a token a new secret; once that is committed the
// old secret is refused and its live streams and sockets end, here at
// once and on the other serves when the journal's token.revoked reaches
// them.
func (s *Server) rotateAPIToken(w http.ResponseWriter, r *http.Request) {
	out, err := s.store.RotateAPIToken(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.auth.recheck(r.Context(), out.Token.ID)
	if out.Token.Name == wire.AdminTokenName && s.opts.OperatorTokenChanged != nil {
		s.opts.OperatorTokenChanged(out.Secret)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// revokeAPIToken revokes a token for good, like rotateAPIToken without a
// new secret.
func (s *Server) revokeAPIToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.store.RevokeAPIToken(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	s.auth.recheck(r.Context(), id)
	w.WriteHeader(http.StatusNoContent)
}
