package server

import (
	"bytes"
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
// request. A revocation or rotation rechecks the token against the
// database (recheck): the cache forgets it, and its live requests,
// streams and sockets that authenticated with a secret no longer current
// end at once — on the serve that made the change, and on every other
// serve of the database when the journal's token.revoked reaches it
// (ObserveEvents, within the journal's poll interval). The TTL bounds how
// long a missed event could let an old secret through.

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
	cache   map[[32]byte]cachedToken          // by secret hash
	touched map[string]time.Time              // by token id
	live    map[string]map[*liveConn]struct{} // by token id
}

// liveConn is one request, stream or socket authenticated by a token's
// secret (its hash), ended by cancel when that secret stops being valid.
type liveConn struct {
	hash   [32]byte
	cancel context.CancelFunc
}

func newTokenAuth(s *Server) *tokenAuth {
	return &tokenAuth{s: s, cache: map[[32]byte]cachedToken{}, touched: map[string]time.Time{},
		live: map[string]map[*liveConn]struct{}{}}
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

// lookup returns the live token whose secret has hash key, errNoToken
// when there is none, or the database's error.
func (a *tokenAuth) lookup(ctx context.Context, key [32]byte) (store.APIToken, error) {
	if err := a.adopt(ctx); err != nil {
		return store.APIToken{}, err
	}
	now := time.Now()
	a.mu.Lock()
	c, ok := a.cache[key]
	a.mu.Unlock()
	if !ok || now.Sub(c.loaded) > tokenCacheTTL {
		tok, err := a.s.store.TokenByHash(ctx, key[:])
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

// hold registers a live connection of token id authenticated by the
// secret of hash key, whose context is ctx: the returned context ends
// when that secret stops being valid; release unregisters.
func (a *tokenAuth) hold(ctx context.Context, id string, key [32]byte) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	lc := &liveConn{hash: key, cancel: cancel}
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

// recheck asks the database for token id's current secret and state: the
// cache forgets every other secret of it (all of them once it is revoked)
// and the live connections made with those end. When the database cannot
// say, everything of the token is forgotten and ended (fail closed: a
// client reconnects and is checked afresh).
func (a *tokenAuth) recheck(ctx context.Context, id string) {
	cur, revoked, err := a.s.store.TokenSecretHash(ctx, id)
	valid := func(h [32]byte) bool { return err == nil && !revoked && bytes.Equal(h[:], cur) }
	a.mu.Lock()
	for k, c := range a.cache {
		if c.tok.ID == id && !valid(k) {
			delete(a.cache, k)
		}
	}
	var cancels []context.CancelFunc
	for lc := range a.live[id] {
		if !valid(lc.hash) {
			cancels = append(cancels, lc.cancel)
		}
	}
	a.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// ObserveEvents learns from the journal what other serves of the database
// did: a token.revoked (a revocation or rotation) is rechecked here too.
// Wire it to the journal hub's published events; it does not block.
func (s *Server) ObserveEvents(evs []wire.Event) {
	for _, ev := range evs {
		if ev.Topic != string(wire.TopicTokenRevoked) {
			continue
		}
		var p struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil || p.ID == "" {
			continue
		}
		s.bg.goFunc(func() {
			ctx, cancel := context.WithTimeout(s.streamCtx, 5*time.Second)
			defer cancel()
			s.auth.recheck(ctx, p.ID)
		})
	}
}

// authKey holds the request's authentication in its context.
type authKey struct{}

// authInfo is the token that authenticated a request and the hash of
// the secret it presented.
type authInfo struct {
	tok  store.APIToken
	hash [32]byte
}

// tokenOf is the token that authenticated the request of ctx (zero
// outside operatorAuth and the sockets).
func tokenOf(ctx context.Context) store.APIToken {
	a, _ := ctx.Value(authKey{}).(authInfo)
	return a.tok
}

// authenticated answers the token of a secret's hash, or writes the
// refusal and reports false: 401 for no valid token, 503 when the
// database cannot say, 403 forbidden when the token's role may not use
// the route.
func (s *Server) authenticated(w http.ResponseWriter, r *http.Request, key [32]byte, present bool) (store.APIToken, bool) {
	var tok store.APIToken
	err := errNoToken
	if present {
		tok, err = s.auth.lookup(r.Context(), key)
	}
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

// secretHash is the SHA-256 of a presented secret, and whether there was
// one.
func secretHash(secret string) ([32]byte, bool) {
	return sha256.Sum256([]byte(secret)), secret != ""
}

// asToken runs the rest of a request as tok, authenticated by the secret
// of hash key: its context names tok (tokenOf) and the actor of every
// event it journals, and ends when that secret stops being valid. The
// returned func must be called when the request ends.
func (s *Server) asToken(r *http.Request, tok store.APIToken, key [32]byte) (*http.Request, func()) {
	ctx, release := s.auth.hold(r.Context(), tok.ID, key)
	ctx = context.WithValue(ctx, authKey{}, authInfo{tok: tok, hash: key})
	ctx = store.WithActor(ctx, tok.Name)
	return r.WithContext(ctx), release
}
