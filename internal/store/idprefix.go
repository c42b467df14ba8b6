package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

// The lookups by id prefix behind ?id_prefix= (docs/api.md#finding-an-object-by-id-prefix):
// the CLI turns the 8 characters its tables print into a full id with
// one of them. Each reads a range of the primary key, in the order of
// its list, at most wire.MaxIDPrefixMatches rows.

// ProjectsByIDPrefix returns the projects whose id starts with p,
// archived ones only when asked, by name.
func (s *Store) ProjectsByIDPrefix(ctx context.Context, p wire.IDPrefix, includeArchived bool) ([]wire.Project, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+projectColumns+` FROM projects
		WHERE id BETWEEN $1::uuid AND $2::uuid AND ($3 OR status = 'active')
		ORDER BY name, created_at LIMIT $4`, p.First, p.Last, includeArchived, wire.MaxIDPrefixMatches)
	if err != nil {
		return nil, fmt.Errorf("projects by id prefix %s: %w", p.Prefix, translate(err))
	}
	return collectByPrefix(rows, scanProject, "projects", p)
}

// HostsByIDPrefix returns the hosts whose id starts with p, by name.
func (s *Store) HostsByIDPrefix(ctx context.Context, p wire.IDPrefix) ([]wire.Host, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+hostColumns+` FROM hosts h
		WHERE h.id BETWEEN $1::uuid AND $2::uuid ORDER BY h.name LIMIT $3`, p.First, p.Last, wire.MaxIDPrefixMatches)
	if err != nil {
		return nil, fmt.Errorf("hosts by id prefix %s: %w", p.Prefix, translate(err))
	}
	return collectByPrefix(rows, scanHost, "hosts", p)
}

// WorkItemsByIDPrefix returns the work items of any project whose id
// starts with p, oldest first: `pam item show 3f2a1b4c` names no project.
func (s *Store) WorkItemsByIDPrefix(ctx context.Context, p wire.IDPrefix) ([]wire.WorkItem, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+itemColumns+` FROM work_items
		WHERE id BETWEEN $1::uuid AND $2::uuid ORDER BY created_at, id LIMIT $3`, p.First, p.Last, wire.MaxIDPrefixMatches)
	if err != nil {
		return nil, fmt.Errorf("work items by id prefix %s: %w", p.Prefix, translate(err))
	}
	return collectByPrefix(rows, scanItem, "work items", p)
}

func collectByPrefix[T any](rows pgx.Rows, scan func(pgx.Row) (T, error), what string, p wire.IDPrefix) ([]T, error) {
	out, err := pgx.CollectRows(rows, rowTo(scan))
	if err != nil {
		return nil, fmt.Errorf("%s by id prefix %s: %w", what, p.Prefix, translate(err))
	}
	return nonNil(out), nil
}
