package runs

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"pam/internal/lifecycle"
	"pam/internal/provider"
	"pam/internal/store"
	"pam/internal/wire"
)

// CreateRun admits a run in pending (docs/architecture.md#run-status-machine). It never fails for lack of a
// host: placement is the dispatcher's job. The caller has checked the
// request (wire.CreateRun.Validate) and the prompt against the
// provider's catalog (server.createRun).
func (s *Service) CreateRun(ctx context.Context, in wire.CreateRun) (wire.Run, error) {
	pol := s.st.Policy.WithDefaults()
	var out wire.Run
	for try := 0; ; try++ {
		err := s.st.InTx(ctx, func(tx *store.Tx) error {
			var err error
			if out, err = tx.AdmitRun(ctx, in, pol.MaxAttempts); err != nil {
				return err
			}
			_, err = s.st.Apply(ctx, tx, out, lifecycle.Created(out.Provider, out.SessionName, out.TargetHostID))
			return err
		})
		if store.IsUniqueViolation(err, "runs_session_name_key") && try < 10 {
			continue // the 8-hex prefix is taken: a new id
		}
		if err != nil {
			return wire.Run{}, fmt.Errorf("create a run of task %s: %w", in.TaskID, err)
		}
		return out, nil
	}
}

// StopRun moves a pending, spawning or running run to stopped (a manual
// stop wins over anything after it). It returns the run and the host that
// must run the stop ladder, if any.
func (s *Service) StopRun(ctx context.Context, id string, force bool) (wire.Run, string, error) {
	var out wire.Run
	var host string
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		r, err := tx.LockRun(ctx, id)
		if err != nil {
			return err
		}
		d, err := lifecycle.Stop(lifecycle.FromWire(r), force)
		if err != nil {
			return err
		}
		if r.HostID != nil {
			host = *r.HostID
		}
		out, err = s.st.Apply(ctx, tx, r, d)
		return err
	})
	if err != nil {
		return wire.Run{}, "", fmt.Errorf("stop run %s: %w", id, err)
	}
	return out, host, nil
}

// RetryRun requeues a run that ended failed with its attempts used up,
// raising max_attempts by one. The new attempt resumes the agent's
// conversation unless fresh (docs/architecture.md#resume-and-continue);
// a run that was continued is not retried.
func (s *Service) RetryRun(ctx context.Context, id string, fresh bool) (wire.Run, error) {
	var out wire.Run
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		r, err := tx.LockRun(ctx, id)
		if err != nil {
			return err
		}
		if err := tx.RefuseArchived(ctx, r.ProjectID); err != nil {
			return err
		}
		continuedBy, err := tx.ContinuationOf(ctx, r.ID)
		if err != nil {
			return err
		}
		d, err := lifecycle.Retry(lifecycle.FromWire(r), fresh, continuedBy, s.st.Now())
		if err != nil {
			return err
		}
		out, err = s.st.Apply(ctx, tx, r, d)
		return err
	})
	if err != nil {
		return wire.Run{}, fmt.Errorf("retry run %s: %w", id, err)
	}
	return out, nil
}

// CompleteRun is the manual completion mark: it does not stop the run.
func (s *Service) CompleteRun(ctx context.Context, id string) (wire.Run, error) {
	var out wire.Run
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		r, err := tx.LockRun(ctx, id)
		if err != nil {
			return err
		}
		out, err = s.st.Apply(ctx, tx, r, lifecycle.Complete(wire.SourceManual))
		return err
	})
	if err != nil {
		return wire.Run{}, fmt.Errorf("complete run %s: %w", id, err)
	}
	return out, nil
}

// ContinueRun is POST /runs/{id}/continue: a new run in pending that
// continues the ended run id — the same task, pinned to the host the old
// run ran on, in its worktree (or cwd), resuming its conversation with
// the provider's resume_args and in.Text as the message. The worktree
// becomes the new run's (the old run's workspace is null from now on, so
// its clean-up never touches it); the old run journals run.continued.
// The caller has checked the request (wire.ContinueRun.Validate) and the
// text against the provider's catalog.
func (s *Service) ContinueRun(ctx context.Context, id string, in wire.ContinueRun) (wire.Run, error) {
	text := ""
	if in.Text != nil {
		text = *in.Text
	}
	pol := s.st.Policy.WithDefaults()
	var out wire.Run
	for try := 0; ; try++ {
		err := s.st.InTx(ctx, func(tx *store.Tx) error {
			var err error
			out, err = s.continueIn(ctx, tx, id, in.Provider, text, pol.MaxAttempts)
			return err
		})
		if store.IsUniqueViolation(err, "runs_session_name_key") && try < 10 {
			continue // the 8-hex prefix is taken: a new id
		}
		if err != nil {
			return wire.Run{}, fmt.Errorf("continue run %s: %w", id, err)
		}
		return out, nil
	}
}

// continueIn is ContinueRun's transaction: the old run locked and its
// conversation found, the continuation decided (lifecycle.Continue),
// inserted and journaled, the worktree handed over.
func (s *Service) continueIn(ctx context.Context, tx *store.Tx, id string, provName *string, text string, maxAttempts int) (wire.Run, error) {
	old, err := tx.LockRun(ctx, id)
	if err != nil {
		return wire.Run{}, err
	}
	if err := tx.RefuseArchived(ctx, old.ProjectID); err != nil {
		return wire.Run{}, err
	}
	prov := old.Provider
	if provName != nil {
		prov = *provName
	}
	var f lifecycle.ContinueFacts
	if f.ContinuedBy, err = tx.ContinuationOf(ctx, old.ID); err != nil {
		return wire.Run{}, err
	}
	where, err := tx.ConversationOf(ctx, old)
	if err != nil {
		return wire.Run{}, err
	}
	f.WorktreeGone = where.Mode == wire.WorkspaceWorktree && old.Workspace == nil
	switch {
	case where.WorkspaceHost != nil:
		f.Host = *where.WorkspaceHost
	case where.LastHost != nil:
		f.Host = *where.LastHost
	}
	if f.Host != "" {
		if f.Resumable, err = resumableOn(ctx, tx, f.Host, prov); err != nil {
			return wire.Run{}, err
		}
	}
	newID := uuid.NewString()
	d, err := lifecycle.Continue(lifecycle.FromWire(old), f, newID)
	if err != nil {
		return wire.Run{}, err
	}
	out, err := tx.InsertContinuation(ctx, store.NewContinuation{ID: newID, Old: old, Provider: prov, Host: f.Host,
		MaxAttempts: maxAttempts, Text: text, Where: where})
	if err != nil {
		return wire.Run{}, err
	}
	if out, err = s.st.Apply(ctx, tx, out, lifecycle.ContinuationCreated(prov, out.SessionName, f.Host, old.ID)); err != nil {
		return wire.Run{}, err
	}
	if old, err = tx.HandOverWorkspace(ctx, old); err != nil {
		return wire.Run{}, err
	}
	_, err = s.st.Apply(ctx, tx, old, d)
	return out, err
}

// resumableOn reports whether the provider resumes conversations on the
// host: as its worker reported its catalog, or, for a worker that did
// not say, as the built-in entry does.
func resumableOn(ctx context.Context, tx *store.Tx, hostID, name string) (bool, error) {
	reported, said, err := tx.ResumableOn(ctx, hostID)
	if err != nil {
		return false, err
	}
	if !said {
		return provider.BuiltinResumable(name), nil
	}
	return slices.Contains(reported, name), nil
}
