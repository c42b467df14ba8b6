package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"pam/internal/store"
	"pam/internal/wire"
)

// Authentication of the operator's API by named tokens
// (docs/architecture.md#security-model). The database is the truth: a
// presented secret is looked up by its SHA-256, and what the lookup found
// is kept for tokenCacheTTL so that a busy dashboard costs no query per
// request. A revocation or rotation drops the token from the cache and
// ends its live requests, streams and sockets at once on the serve that
// made it, and on every other serve of the database when the journal's
// token.revoked reaches it (ObserveEvents, within the journal's poll
// interval); the TTL bounds how long a missed event could let an old
// secret through.

const (
	// tokenCacheTTL is how long a looked-up token is trusted without
	// asking the database again.
	tokenCacheTTL = 5 * time.Second
	// touchEvery bounds how often this server records a token's
	// last_used_at.
	touchEvery = time.Minute
	// maxCachedTokens bounds the cache; beyond it, it is emptied.
	maxCachedTokens = 10000
)

type cachedToken struct {
	tok    store.APIToken
	loaded time.Time
}

// tokenAuth is a server's token cache and the live connections of each
// token.
type tokenAuth struct {
	s *Server

	mu      sync.Mutex
	adopted bool
	cache   map[[32]byte]cachedToken
	touched map[string]time.Time              // by token id
	live    map[string]map[*liveConn]struct{} // by token id
	// revokedAt: when each token was last revoked or rotated here, so a
	// ticket issued before does not outlive it (bounded like the cache).
	revokedAt map[string]time.Time
}

// liveConn is one request, stream or socket authenticated by a token,
// ended by cancel when the token is revoked.
type liveConn struct{ cancel context.CancelFunc }

func newTokenAuth(s *Server) *tokenAuth {
	return &tokenAuth{s: s, cache: map[[32]byte]cachedToken{}, touched: map[string]time.Time{},
		live: map[string]map[*liveConn]struct{}{}, revokedAt: map[string]time.Time{}}
}

// adopt makes the server's operator token (Options.Token) the admin token
// named admin once, before the first lookup: a database from before named
// tokens, or a fresh one, gets its admin.
func (a *tokenAuth) adopt(ctx context.Context) error {
	a.mu.Lock()
	done := a.adopted
	a.mu.Unlock()
	if done || a.s.opts.Token == "" {
		return nil
	}
	if err := a.s.store.AdoptAdminToken(ctx, a.s.opts.Token); err != nil {
		return err
	}
	a.mu.Lock()
	a.adopted = true
	a.mu.Unlock()
	return nil
}

// errNoToken is an absent, unknown or revoked secret.
var errNoToken = errors.New("no such token")

// lookup returns the live token whose secret is secret, errNoToken when
// there is none, or the database's error.
func (a *tokenAuth) lookup(ctx context.Context, secret string) (store.APIToken, error) {
	if secret == "" {
		return store.APIToken{}, errNoToken
	}
	if err := a.adopt(ctx); err != nil {
		return store.APIToken{}, err
	}
	key := sha256.Sum256([]byte(secret))
	now := time.Now()
	a.mu.Lock()
	c, ok := a.cache[key]
	a.mu.Unlock()
	if !ok || now.Sub(c.loaded) > tokenCacheTTL {
		tok, err := a.s.store.TokenBySecret(ctx, secret)
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeNotFound {
			return store.APIToken{}, errNoToken
		}
		if err != nil {
			return store.APIToken{}, err
		}
		c = cachedToken{tok: tok, loaded: now}
		a.mu.Lock()
		if len(a.cache) >= maxCachedTokens {
			clear(a.cache)
		}
		a.cache[key] = c
		a.mu.Unlock()
	}
	if c.tok.Revoked {
		return store.APIToken{}, errNoToken
	}
	a.touch(c.tok.ID, now)
	return c.tok, nil
}

// touch records a use of token id in the database at most once per
// touchEvery, off the request's path.
func (a *tokenAuth) touch(id string, now time.Time) {
	a.mu.Lock()
	if now.Sub(a.touched[id]) < touchEvery {
		a.mu.Unlock()
		return
	}
	a.touched[id] = now
	a.mu.Unlock()
	a.s.bg.goFunc(func() {
		ctx, cancel := context.WithTimeout(a.s.streamCtx, 5*time.Second)
		defer cancel()
		if err := a.s.store.TouchToken(ctx, id, now); err != nil && ctx.Err() == nil {
			a.s.log.Warn("record a token's last use", "token_id", id, "err", err)
		}
	})
}

// hold registers a live connection of token id whose context is ctx: the
// returned context ends when the token is revoked; release unregisters.
func (a *tokenAuth) hold(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	lc := &liveConn{cancel: cancel}
	a.mu.Lock()
	m := a.live[id]
	if m == nil {
		m = map[*liveConn]struct{}{}
		a.live[id] = m
	}
	m[lc] = struct{}{}
	a.mu.Unlock()
	return ctx, func() {
		a.mu.Lock()
		delete(a.live[id], lc)
		if len(a.live[id]) == 0 {
			delete(a.live, id)
		}
		a.mu.Unlock()
		cancel()
	}
}

// revoked forgets token id and ends its live connections.
func (a *tokenAuth) revoked(id string) {
	a.mu.Lock()
	if len(a.revokedAt) >= maxCachedTokens {
		clear(a.revokedAt)
	}
	a.revokedAt[id] = time.Now()
	for k, c := range a.cache {
		if c.tok.ID == id {
			delete(a.cache, k)
		}
	}
	var cancels []context.CancelFunc
	for lc := range a.live[id] {
		cancels = append(cancels, lc.cancel)
	}
	a.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// revokedSince reports whether token id was revoked or rotated here at or
// after t.
func (a *tokenAuth) revokedSince(id string, t time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.revokedAt[id]
	return ok && !at.Before(t)
}

// ObserveEvents learns from the journal what other serves of the database
// did: a token.revoked (a revocation or rotation) ends that token here
// too. Wire it to the journal hub's published events.
func (s *Server) ObserveEvents(evs []wire.Event) {
	for _, ev := range evs {
		if ev.Topic != string(wire.TopicTokenRevoked) {
			continue
		}
		var p struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.ID != "" {
			s.auth.revoked(p.ID)
		}
	}
}

// tokenKey holds the request's token in its context.
type tokenKey struct{}

// tokenOf is the token that authenticated r (zero outside operatorAuth
// and the sockets).
func tokenOf(ctx context.Context) store.APIToken {
	t, _ := ctx.Value(tokenKey{}).(store.APIToken)
	return t
}

// authenticated answers the request's token, or writes the refusal and
// reports false: 401 for no valid token, 503 when the database cannot
// say, 403 forbidden when the token's role may not use the route.
func (s *Server) authenticated(w http.ResponseWriter, r *http.Request, secret string) (store.APIToken, bool) {
	tok, err := s.auth.lookup(r.Context(), secret)
	if errors.Is(err, errNoToken) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pam"`)
		writeError(w, wire.Errorf(wire.CodeUnauthorized, "missing or invalid operator token"))
		return tok, false
	}
	if err != nil {
		s.fail(w, r, err)
		return tok, false
	}
	if !RoleAllows(tok.Role, r.Pattern) {
		writeError(w, forbidden(tok.Role, r))
		return tok, false
	}
	return tok, true
}

// asToken runs the rest of a request as tok: its context names tok
// (tokenOf) and the actor of every event it journals, and ends when tok
// is revoked. The returned func must be called when the request ends.
func (s *Server) asToken(r *http.Request, tok store.APIToken) (*http.Request, func()) {
	ctx, release := s.auth.hold(r.Context(), tok.ID)
	ctx = context.WithValue(ctx, tokenKey{}, tok)
	ctx = store.WithActor(ctx, tok.Name)
	return r.WithContext(ctx), release
}
