package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"pam/internal/wire"
)

const projectColumns = `id::text, name, slug, description, status, auto_done, auto_continue, repo, created_at, updated_at`

var slugRe = wire.SlugRe

func scanProject(row pgx.Row) (wire.Project, error) {
	var p wire.Project
	err := row.Scan(&p.ID, &p.Name, &p.Slug, &p.Description, &p.Status, &p.AutoDone, &p.AutoContinue, &p.Repo, &p.CreatedAt, &p.UpdatedAt)
	utc(&p.CreatedAt, &p.UpdatedAt)
	return p, err
}

// Slugify derives a slug from a name: lowercase ASCII letters, digits and
// dashes, at most max characters, never empty ("x" stands in).
func Slugify(name string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case b.Len() > 0 && !dash:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= max {
			break
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > max {
		s = strings.Trim(s[:max], "-")
	}
	if s == "" {
		s = "x"
	}
	return s
}

// CreateProject inserts a project (checked by wire.CreateProject.Validate), journaling project.created.
// A slug derived from the name gets a numeric suffix when taken; an
// explicit slug that is taken is a 409 slug_taken.
func (s *Store) CreateProject(ctx context.Context, in wire.CreateProject) (wire.Project, error) {
	explicit := in.Slug != nil
	slug := ""
	if explicit {
		slug = *in.Slug
	} else {
		slug = Slugify(in.Name, 56)
	}
	desc := ""
	if in.Description != nil {
		desc = *in.Description
	}
	autoDone := true
	if in.AutoDone != nil {
		autoDone = *in.AutoDone
	}
	autoContinue := true
	if in.AutoContinue != nil {
		autoContinue = *in.AutoContinue
	}
	var repo *wire.Repo
	if in.Repo != nil {
		r, err := wire.ValidateRepo(*in.Repo)
		if err != nil {
			return wire.Project{}, err
		}
		repo = &r
	}
	for i := 1; ; i++ {
		candidate := slug
		if i > 1 {
			candidate = fmt.Sprintf("%s-%d", slug, i)
		}
		var p wire.Project
		err := s.InTx(ctx, func(tx *Tx) error {
			var err error
			p, err = scanProject(tx.QueryRow(ctx, `INSERT INTO projects (id, name, slug, description, auto_done, auto_continue, repo)
				VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+projectColumns, uuid.NewString(), in.Name, candidate, desc, autoDone, autoContinue, repo))
			if err != nil {
				return err
			}
			return tx.Journal(ctx, NewEvent{Topic: wire.TopicProjectCreated, ProjectID: p.ID, Payload: p})
		})
		if IsUniqueViolation(err, "projects_slug_key") {
			if explicit {
				return wire.Project{}, wire.Conflict(wire.CodeSlugTaken, "slug %q is taken", candidate).With("field", "slug")
			}
			if i < 100 {
				continue
			}
		}
		if err != nil {
			return wire.Project{}, fmt.Errorf("create project %q: %w", candidate, err)
		}
		return p, nil
	}
}

// ListProjects returns active projects (and archived ones if asked), by name.
func (s *Store) ListProjects(ctx context.Context, includeArchived bool) ([]wire.Project, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+projectColumns+` FROM projects
		WHERE $1 OR status = 'active' ORDER BY name, created_at`, includeArchived)
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, rowTo(scanProject))
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", translate(err))
	}
	return nonNil(out), nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// projectByRef resolves an id or a slug; lock takes FOR NO KEY UPDATE.
//
// Row locks in this package are FOR NO KEY UPDATE: they order writers of
// the row but do not conflict with the FOR KEY SHARE locks that foreign-key
// checks take (an INSERT into runs key-shares its work item and project;
// updating a row twice in one transaction re-checks its keys). FOR UPDATE
// there would turn two such transactions into a lock-upgrade deadlock.
func projectByRef(ctx context.Context, q querier, ref string, lock bool) (wire.Project, error) {
	col := "slug"
	if wire.ValidUUID(ref) {
		col = "id"
	} else if !slugRe.MatchString(ref) {
		return wire.Project{}, wire.NotFound("project")
	}
	sql := `SELECT ` + projectColumns + ` FROM projects WHERE ` + col + `::text = $1`
	if lock {
		sql += ` FOR NO KEY UPDATE`
	}
	p, err := scanProject(q.QueryRow(ctx, sql, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.Project{}, wire.NotFound("project")
	}
	if err != nil {
		return wire.Project{}, fmt.Errorf("read project %s: %w", ref, translate(err))
	}
	return p, nil
}

// GetProject resolves a project by id or slug.
func (s *Store) GetProject(ctx context.Context, ref string) (wire.Project, error) {
	return projectByRef(ctx, s.Pool, ref, false)
}

// UpdateProject applies the given fields, journaling project.updated when
// anything changed. The caller has checked in (wire.UpdateProject.Validate).
func (s *Store) UpdateProject(ctx context.Context, ref string, in wire.UpdateProject) (wire.Project, error) {
	var repo *wire.Repo
	if in.Repo.Set && in.Repo.Value != nil {
		r, err := wire.ValidateRepo(*in.Repo.Value)
		if err != nil {
			return wire.Project{}, err
		}
		repo = &r
	}
	var out wire.Project
	err := s.InTx(ctx, func(tx *Tx) error {
		p, err := projectByRef(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		changed := map[string]any{}
		if in.Name != nil && *in.Name != p.Name {
			changed["name"] = *in.Name
		}
		if in.Description != nil && *in.Description != p.Description {
			changed["description"] = *in.Description
		}
		if in.AutoDone != nil && *in.AutoDone != p.AutoDone {
			changed["auto_done"] = *in.AutoDone
		}
		if in.AutoContinue != nil && *in.AutoContinue != p.AutoContinue {
			changed["auto_continue"] = *in.AutoContinue
		}
		if in.Repo.Set && !sameRepo(repo, p.Repo) {
			changed["repo"] = repo
		}
		if len(changed) == 0 {
			out = p
			return nil
		}
		_, repoChanged := changed["repo"]
		out, err = scanProject(tx.QueryRow(ctx, `UPDATE projects SET
			name = coalesce($2, name), description = coalesce($3, description), auto_done = coalesce($4, auto_done),
			repo = CASE WHEN $5 THEN $6::jsonb ELSE repo END, auto_continue = coalesce($7, auto_continue), updated_at = now()
			WHERE id = $1 RETURNING `+projectColumns, p.ID, in.Name, in.Description, in.AutoDone, repoChanged, repo, in.AutoContinue))
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicProjectUpdated, ProjectID: p.ID, Payload: map[string]any{"project": out, "changed": changed}})
	})
	if err != nil {
		return wire.Project{}, fmt.Errorf("update project %s: %w", ref, err)
	}
	return out, nil
}

// ArchiveProject soft-deletes a project (status archived), journaling
// project.archived once; archiving an archived project changes nothing.
func (s *Store) ArchiveProject(ctx context.Context, ref string) (wire.Project, error) {
	var out wire.Project
	err := s.InTx(ctx, func(tx *Tx) error {
		p, err := projectByRef(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		if p.Status == wire.ProjectArchived {
			out = p
			return nil
		}
		out, err = scanProject(tx.QueryRow(ctx, `UPDATE projects SET status = 'archived', updated_at = now()
			WHERE id = $1 RETURNING `+projectColumns, p.ID))
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicProjectArchived, ProjectID: p.ID, Payload: out})
	})
	if err != nil {
		return wire.Project{}, fmt.Errorf("archive project %s: %w", ref, err)
	}
	return out, nil
}

// UnarchiveProject makes an archived project active again, journaling
// project.updated with changed.status; unarchiving an active project
// changes nothing.
func (s *Store) UnarchiveProject(ctx context.Context, ref string) (wire.Project, error) {
	var out wire.Project
	err := s.InTx(ctx, func(tx *Tx) error {
		p, err := projectByRef(ctx, tx, ref, true)
		if err != nil {
			return err
		}
		if p.Status != wire.ProjectArchived {
			out = p
			return nil
		}
		out, err = scanProject(tx.QueryRow(ctx, `UPDATE projects SET status = 'active', updated_at = now()
			WHERE id = $1 RETURNING `+projectColumns, p.ID))
		if err != nil {
			return err
		}
		return tx.Journal(ctx, NewEvent{Topic: wire.TopicProjectUpdated, ProjectID: p.ID,
			Payload: map[string]any{"project": out, "changed": map[string]any{"status": out.Status}}})
	})
	if err != nil {
		return wire.Project{}, fmt.Errorf("unarchive project %s: %w", ref, err)
	}
	return out, nil
}

// refuseArchived refuses a change to the work items or runs of an
// archived project: it is read-only until unarchived.
func refuseArchived(p wire.Project) error {
	if p.Status == wire.ProjectArchived {
		return wire.Conflict(wire.CodeProjectArchived, "project %s is archived; unarchive it first", p.ID).With("project_id", p.ID)
	}
	return nil
}

// refuseArchivedID is refuseArchived for a project known by id. It reads
// the status without a lock: an archive racing a change may let that one
// change through, as if it had come first.
func refuseArchivedID(ctx context.Context, q querier, projectID string) error {
	var status string
	if err := q.QueryRow(ctx, `SELECT status FROM projects WHERE id = $1`, projectID).Scan(&status); err != nil {
		return fmt.Errorf("read the status of project %s: %w", projectID, translate(err))
	}
	return refuseArchived(wire.Project{ID: projectID, Status: status})
}

// RefuseArchived refuses a change to the runs of an archived project
// (refuseArchivedID).
func (tx *Tx) RefuseArchived(ctx context.Context, projectID string) error {
	return refuseArchivedID(ctx, tx, projectID)
}

// sameRepo compares two repos, either of which may be absent.
func sameRepo(a, b *wire.Repo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
