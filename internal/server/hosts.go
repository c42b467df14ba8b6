package server

import (
	"net/http"
	"time"

	"pam/internal/defaults"
	"pam/internal/wire"
)

// The host registry and the provider list (docs/api.md#resources).

func (s *Server) hostOfflineAfter() time.Duration {
	if s.opts.HostOfflineAfter > 0 {
		return s.opts.HostOfflineAfter
	}
	return defaults.HostOfflineAfter
}

func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) {
	prefix, err := idPrefix(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var hs []wire.Host
	if prefix != nil {
		hs, err = s.store.HostsByIDPrefix(r.Context(), *prefix)
	} else {
		hs, err = s.store.ListHosts(r.Context())
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.HostList{Hosts: hs})
}

func (s *Server) createHost(w http.ResponseWriter, r *http.Request) {
	var in wire.CreateHost
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.store.CreateHost(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The token is in this body and nowhere else: not cached by anyone.
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) getHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.store.GetHost(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// disableHost withholds new work from a host and, when it was enabled,
// closes its live uplink and relays at once (docs/architecture.md#security-model).
// The worker's token still holds: it registers again, reconnects and
// goes on streaming and signalling its runs, but is dispatched nothing.
func (s *Server) disableHost(w http.ResponseWriter, r *http.Request) {
	before, err := s.store.HostByRef(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h, err := s.store.DisableHost(r.Context(), before.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !before.Disabled {
		s.opts.Fleet.Revoke(h.ID, "host disabled")
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Server) enableHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.store.EnableHost(r.Context(), r.PathValue("ref"), s.hostOfflineAfter())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// updateHost is PATCH /hosts/{ref}: it changes the host's max_runs, the
// only setting an operator edits after creation (pam up sets its own
// host's from PAM_MAX_RUNS this way).
func (s *Server) updateHost(w http.ResponseWriter, r *http.Request) {
	var in wire.UpdateHost
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	h, err := s.store.SetMaxRuns(r.Context(), r.PathValue("ref"), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Server) clearSuspect(w http.ResponseWriter, r *http.Request) {
	h, err := s.store.ClearSuspect(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// rotateToken replaces a host's worker token; once the new one is
// committed, the live uplink (admitted with the old one) and its relays
// are closed at once.
func (s *Server) rotateToken(w http.ResponseWriter, r *http.Request) {
	h, err := s.store.HostByRef(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	tok, err := s.store.RotateToken(r.Context(), h.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.opts.Fleet.Revoke(h.ID, "worker token rotated")
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, tok)
}

// deleteHost removes a host; once that is committed its live uplink and
// relays are closed at once.
func (s *Server) deleteHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.store.HostByRef(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.store.DeleteHost(r.Context(), h.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	s.opts.Fleet.Revoke(h.ID, "host removed")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listProviders(w http.ResponseWriter, r *http.Request) {
	ps, err := s.store.Providers(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ProviderList{Providers: ps})
}
