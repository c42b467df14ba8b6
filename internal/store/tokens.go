package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// Named API tokens (docs/architecture.md#security-model). A secret is 32
// lowercase hex characters (128 bits), like the operator token it
// generalises; the database keeps only its SHA-256, and a presented
// secret is looked up by that hash, so the comparison that matters is a
// hash lookup whose timing says nothing about any stored secret.

// APIToken is a token as the server's authentication needs it.
type APIToken struct {
	wire.Token
	Revoked bool
}

// HashTokenSecret is the SHA-256 of a secret as presented (its hex text).
func HashTokenSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// NewTokenSecret makes a fresh 128-bit secret.
func NewTokenSecret() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a token secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

const tokenColumns = `id::text, name, role, created_at, last_used_at, revoked_at IS NOT NULL`

func scanToken(row pgx.Row) (APIToken, error) {
	var t APIToken
	err := row.Scan(&t.ID, &t.Name, &t.Role, &t.CreatedAt, &t.LastUsedAt, &t.Revoked)
	utc(&t.CreatedAt)
	utcp(t.LastUsedAt)
	return t, err
}

// AdoptAdminToken makes secret the admin token named admin unless a token
// of that name exists: how the operator token of a database from before
// named tokens (or of a fresh one) becomes a named token. Servers racing
// to adopt insert at most one row.
func (s *Store) AdoptAdminToken(ctx context.Context, secret string) error {
	_, err := s.Pool.Exec(ctx, `INSERT INTO api_tokens (id, name, role, secret_hash) VALUES ($1, $2, 'admin', $3)
		ON CONFLICT (name) DO NOTHING`, uuid.NewString(), wire.AdminTokenName, HashTokenSecret(secret))
	if IsUniqueViolation(err, "api_tokens_secret") {
		return nil // the secret is already some token's
	}
	if err != nil {
		return fmt.Errorf("adopt the operator token as the admin token: %w", translate(err))
	}
	return nil
}

// TokenByHash finds the token whose secret has the SHA-256 hash, revoked
// or not; wire.NotFound when none.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (APIToken, error) {
	t, err := scanToken(s.Pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE secret_hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, wire.NotFound("token")
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("look a token up: %w", translate(err))
	}
	return t, nil
}

// TokenSecretHash is the current secret hash of token id and whether it
// is revoked; wire.NotFound when there is no such token.
func (s *Store) TokenSecretHash(ctx context.Context, id string) (hash []byte, revoked bool, err error) {
	err = s.Pool.QueryRow(ctx, `SELECT secret_hash, revoked_at IS NOT NULL FROM api_tokens WHERE id = $1`, id).Scan(&hash, &revoked)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, wire.NotFound("token")
	}
	if err != nil {
		return nil, false, fmt.Errorf("read a token's secret hash: %w", translate(err))
	}
	return hash, revoked, nil
}

// ListTokens returns the tokens that are not revoked, by name.
func (s *Store) ListTokens(ctx context.Context) ([]wire.Token, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE revoked_at IS NULL ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", translate(err))
	}
	ts, err := pgx.CollectRows(rows, rowTo(scanToken))
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", translate(err))
	}
	out := make([]wire.Token, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Token)
	}
	return out, nil
}

// CreateToken makes a named token of a role and returns its secret, the
// only time it exists outside its holder's hands. A revoked token's name
// can be taken again: the old row is renamed out of the way (its events
// keep the name they were journaled with). The caller has checked in
// (wire.CreateToken.Validate).
func (s *Store) CreateToken(ctx context.Context, in wire.CreateToken) (wire.TokenSecret, error) {
	secret, err := NewTokenSecret()
	if err != nil {
		return wire.TokenSecret{}, fmt.Errorf("create a token: %w", err)
	}
	var t APIToken
	err = s.InTx(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE api_tokens SET name = left(name, 150) || ' (revoked ' || id::text || ')'
			WHERE name = $1 AND revoked_at IS NOT NULL`, in.Name); err != nil {
			return err
		}
		var err error
		t, err = scanToken(tx.QueryRow(ctx, `INSERT INTO api_tokens (id, name, role, secret_hash) VALUES ($1, $2, $3, $4)
			RETURNING `+tokenColumns, uuid.NewString(), in.Name, in.Role, HashTokenSecret(secret)))
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicTokenCreated, Payload: t.Token})
	})
	if IsUniqueViolation(err, "api_tokens_name_key") {
		return wire.TokenSecret{}, wire.Conflict(wire.CodeConflict, "a token named %q exists", in.Name).With("field", "name")
	}
	if err != nil {
		return wire.TokenSecret{}, fmt.Errorf("create a token: %w", translate(err))
	}
	return wire.TokenSecret{Token: t.Token, Secret: secret}, nil
}

// RotateAPIToken gives a live token a new secret; the old one is refused from
// the commit on. Rotating the admin token named admin also replaces the
// operator token kept for the local CLI's token file (server_state), so
// that every serve writes the new secret there when it becomes active.
func (s *Store) RotateAPIToken(ctx context.Context, id string) (wire.TokenSecret, error) {
	secret, err := NewTokenSecret()
	if err != nil {
		return wire.TokenSecret{}, fmt.Errorf("rotate a token: %w", err)
	}
	var t APIToken
	err = s.InTx(ctx, func(tx *Tx) error {
		var err error
		t, err = scanToken(tx.QueryRow(ctx, `UPDATE api_tokens SET secret_hash = $2, last_used_at = NULL
			WHERE id = $1 AND revoked_at IS NULL RETURNING `+tokenColumns, id, HashTokenSecret(secret)))
		if errors.Is(err, pgx.ErrNoRows) {
			return wire.NotFound("token")
		}
		if err != nil {
			return err
		}
		if t.Name == wire.AdminTokenName {
			if _, err := tx.Exec(ctx, `UPDATE server_state SET operator_token = $1`, secret); err != nil {
				return err
			}
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicTokenRevoked, Payload: map[string]any{
			"id": t.ID, "name": t.Name, "role": t.Role, "rotated": true}})
	})
	if err != nil {
		return wire.TokenSecret{}, fmt.Errorf("rotate a token: %w", translate(err))
	}
	return wire.TokenSecret{Token: t.Token, Secret: secret}, nil
}

// RevokeAPIToken revokes a live token for good. The last live admin token
// cannot be revoked (409 conflict): nobody could manage tokens after it.
func (s *Store) RevokeAPIToken(ctx context.Context, id string) error {
	err := s.InTx(ctx, func(tx *Tx) error {
		// Lock the admin rows first, so two revocations of the last two
		// admins cannot both see the other one alive.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM api_tokens WHERE role = 'admin' AND revoked_at IS NULL FOR UPDATE`); err != nil {
			return err
		}
		t, err := scanToken(tx.QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE id = $1 AND revoked_at IS NULL FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return wire.NotFound("token")
		}
		if err != nil {
			return err
		}
		if t.Role == wire.RoleAdmin {
			var admins int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM api_tokens WHERE role = 'admin' AND revoked_at IS NULL`).Scan(&admins); err != nil {
				return err
			}
			if admins <= 1 {
				return wire.Conflict(wire.CodeConflict, "%q is the last admin token: create another admin token first", t.Name)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, id); err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicTokenRevoked, Payload: map[string]any{
			"id": t.ID, "name": t.Name, "role": t.Role, "rotated": false}})
	})
	if err != nil {
		return fmt.Errorf("revoke a token: %w", translate(err))
	}
	return nil
}

// TouchToken records that a token was used at.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	_, err := s.Pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)`, id, at)
	if err != nil {
		return fmt.Errorf("record the use of token %s: %w", id, translate(err))
	}
	return nil
}

// actorKey holds, in a context, who the events journaled under it are by.
type actorKey struct{}

// WithActor returns ctx whose journaled events name actor (wire.Event's
// actor) unless an event names its own: how the token of a request
// reaches every event the request causes, without each store method
// taking it.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorOf is the actor WithActor put in ctx, or "".
func ActorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}
