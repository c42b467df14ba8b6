package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pam/internal/store"
	"pam/internal/wire"
)

// WebSocket authentication (docs/api.md#resources, docs/api.md#websockets, docs/architecture.md#security-model). A browser cannot set headers on
// a WebSocket handshake, so besides the Authorization header a socket
// takes ?ticket= (single use, 30 s, bound to one run and purpose: what the
// dashboard puts in a URL instead of the token). The token itself is never
// taken from a URL: a query string lands in proxies' and browsers' logs
// and histories, where a spent ticket is worth nothing and a token would
// be the operator's. The request logger logs the path only, never the
// query.

const (
	// ticketTTL is how long a ticket is valid.
	ticketTTL = 30 * time.Second
	// maxTickets bounds the tickets outstanding at once; expired ones are
	// swept when the book is full.
	maxTickets = 10000
)

// How a socket authenticated, as journaled with a lease.
const (
	authHeader = "header"
	authTicket = "ticket"
)

type ticket struct {
	runID   string
	purpose string
	expires time.Time
	// hash is the secret hash of the token the ticket was issued to: the
	// socket runs as that token while that secret is valid.
	hash [32]byte
}

// ticketBook holds the outstanding tickets, keyed by the SHA-256 of the
// ticket so that a lookup's timing says nothing about the ticket itself.
type ticketBook struct {
	mu sync.Mutex
	m  map[[32]byte]ticket
}

// issue makes a ticket for runID and purpose, valid until the returned time.
func (b *ticketBook) issue(runID, purpose string, hash [32]byte, now time.Time) (string, time.Time, error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, err
	}
	tok := hex.EncodeToString(raw)
	exp := now.Add(ticketTTL)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[[32]byte]ticket{}
	}
	if len(b.m) >= maxTickets {
		for k, t := range b.m {
			if !now.Before(t.expires) {
				delete(b.m, k)
			}
		}
		if len(b.m) >= maxTickets {
			return "", time.Time{}, wire.Errorf(wire.CodeUnavailable, "too many WebSocket tickets outstanding; retry in %s", ticketTTL)
		}
	}
	b.m[sha256.Sum256([]byte(tok))] = ticket{runID: runID, purpose: purpose, expires: exp, hash: hash}
	return tok, exp, nil
}

// redeem takes a ticket out of the book whatever it is then used for:
// presented once, it is gone, even if it turns out not to fit.
func (b *ticketBook) redeem(tok string, now time.Time) (ticket, bool) {
	k := sha256.Sum256([]byte(tok))
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.m[k]
	if !ok {
		return ticket{}, false
	}
	delete(b.m, k)
	return t, now.Before(t.expires)
}

// createWSTicket serves POST /ws-tickets.
func (s *Server) createWSTicket(w http.ResponseWriter, r *http.Request) {
	var in wire.CreateWSTicket
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if in.Purpose != wire.PurposePane && in.Purpose != wire.PurposeAttach {
		s.fail(w, r, wire.Invalid("purpose", "purpose must be %q or %q", wire.PurposePane, wire.PurposeAttach))
		return
	}
	if in.RunID == "" {
		s.fail(w, r, wire.Invalid("run_id", "run_id is required"))
		return
	}
	// A ticket opens the socket of its purpose, so it takes the role
	// that socket's route needs (roles.go).
	me := tokenOf(r.Context())
	if route := "GET /api/v1/runs/{id}/" + in.Purpose + "/ws"; !RoleAllows(me.Role, route) {
		s.fail(w, r, wire.Errorf(wire.CodeForbidden, "a %s token may not open a %s socket: it needs the %s role",
			me.Role, in.Purpose, RouteRole(route)).With("role", me.Role).With("required", RouteRole(route)))
		return
	}
	run, err := s.store.GetRun(r.Context(), in.RunID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	tok, exp, err := s.term.tickets.issue(run.ID, in.Purpose, r.Context().Value(authKey{}).(authInfo).hash, time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wire.WSTicket{Ticket: tok, ExpiresAt: exp.UTC()})
}

// socket guards a WebSocket route before the upgrade, in this order: a
// browser handshake from a foreign Origin is 403; no valid credential for
// this run and purpose is 401; a token whose role may not use the route
// is 403 forbidden; a run id that is not a UUID or names nothing is 404.
// Only then does h upgrade, with a request whose context names the token
// and ends when the token is revoked (asToken).
func (s *Server) socket(purpose string, h func(w http.ResponseWriter, r *http.Request, run wire.Run, auth string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			s.fail(w, r, wire.Errorf(wire.CodeForbidden, "WebSocket handshake from a foreign origin refused"))
			return
		}
		var tok store.APIToken
		var key [32]byte
		auth := authHeader
		if r.Header.Get("Authorization") != "" {
			// The header if present, and then nothing else.
			var ok, present bool
			key, present = secretHash(bearer(r))
			if tok, ok = s.authenticated(w, r, key, present); !ok {
				return
			}
		} else {
			auth = authTicket
			var ok bool
			if key, ok = s.redeemTicket(r, r.PathValue("id"), purpose); !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="pam"`)
				s.fail(w, r, wire.Errorf(wire.CodeUnauthorized, "missing or invalid operator token or ticket"))
				return
			}
			// The token the ticket was issued to, if its secret is
			// still valid: a ticket does not outlive a revocation.
			if tok, ok = s.authenticated(w, r, key, true); !ok {
				return
			}
		}
		run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		r, release := s.asToken(r, tok, key)
		defer release()
		h(w, r, run, auth)
	}
}

// redeemTicket checks ?ticket= (a ?token= is no credential, whatever it
// holds): issued for this run and purpose and unexpired. It answers the
// secret hash of the token the ticket was issued to.
func (s *Server) redeemTicket(r *http.Request, runID, purpose string) ([32]byte, bool) {
	tk := r.URL.Query().Get("ticket")
	if tk == "" {
		return [32]byte{}, false
	}
	t, ok := s.term.tickets.redeem(tk, time.Now())
	if !ok || t.purpose != purpose || !strings.EqualFold(t.runID, runID) {
		return [32]byte{}, false
	}
	return t.hash, true
}

// sameOrigin admits handshakes without an Origin (not a browser) and
// browser handshakes whose Origin is this server's own host: the
// dashboard is served same-origin, so anything else is a cross-site page
// trying to ride the operator's credentials.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// terminalRoutes adds the live-terminal routes: tickets and the lease
// under the operator token, the sockets under socket's own checks.
func (s *Server) terminalRoutes(api func(pattern string, h http.HandlerFunc)) {
	api("POST /ws-tickets", s.createWSTicket)
	api("DELETE /runs/{id}/lease", s.revokeLease)
	s.mux.Handle("GET /api/v1/runs/{id}/pane/ws", checked(s.counted(s.socket(wire.PurposePane, s.paneWS))))
	s.mux.Handle("GET /api/v1/runs/{id}/attach/ws", checked(s.counted(s.socket(wire.PurposeAttach, s.attachWS))))
	s.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pam_pane_viewers", Help: "Connected pane viewers (pane/ws)."},
			func() float64 { return float64(s.opts.Fleet.PaneViewers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pam_pane_pending_snapshots", Help: "Pane snapshots waiting for a viewer to take them (at most one per viewer)."},
			func() float64 { return float64(s.opts.Fleet.PanePending()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pam_attach_relays", Help: "Open interactive attach relays."},
			func() float64 { return float64(s.opts.Fleet.Attaches()) }),
	)
}
