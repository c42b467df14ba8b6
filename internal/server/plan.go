package server

import (
	"net/http"

	"pam/internal/store"
	"pam/internal/wire"
)

// Projects and work items: the operator's plan (docs/api.md#resources).

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) {
	archived, err := queryBool(r, "include_archived")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	prefix, err := idPrefix(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var ps []wire.Project
	if prefix != nil {
		ps, err = s.store.ProjectsByIDPrefix(r.Context(), *prefix, archived)
	} else {
		ps, err = s.store.ListProjects(r.Context(), archived)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ProjectList{Projects: ps})
}

func (s *Server) createProject(w http.ResponseWriter, r *http.Request) {
	var in wire.CreateProject
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.store.CreateProject(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request) {
	p, err := s.store.GetProject(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) updateProject(w http.ResponseWriter, r *http.Request) {
	var in wire.UpdateProject
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.store.UpdateProject(r.Context(), r.PathValue("ref"), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) archiveProject(w http.ResponseWriter, r *http.Request) {
	p, err := s.store.ArchiveProject(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// unarchiveProject is POST /projects/{ref}/unarchive: an archived project
// becomes active again, its items and runs open to change.
func (s *Server) unarchiveProject(w http.ResponseWriter, r *http.Request) {
	p, err := s.store.UnarchiveProject(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) listWorkItems(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := wire.ValidateItemFilter(q.Get("status"), q.Get("kind"), q.Get("parent_id")); err != nil {
		s.fail(w, r, err)
		return
	}
	items, err := s.store.ListWorkItems(r.Context(), r.PathValue("ref"), store.ItemFilter{
		Status: q.Get("status"), Kind: q.Get("kind"), ParentID: q.Get("parent_id"),
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.WorkItemList{WorkItems: items})
}

func (s *Server) createWorkItem(w http.ResponseWriter, r *http.Request) {
	var in wire.CreateWorkItem
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	item, err := s.store.CreateWorkItem(r.Context(), r.PathValue("ref"), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, item)
}

// findWorkItems is GET /work-items?id_prefix=: the work items of any
// project whose id starts with the prefix. The prefix is required: a
// project's items are listed by GET /projects/{ref}/work-items, and no
// one needs every item of every project at once.
func (s *Server) findWorkItems(w http.ResponseWriter, r *http.Request) {
	prefix, err := idPrefix(r)
	if err == nil && prefix == nil {
		err = wire.Invalid("id_prefix", "id_prefix is required")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items, err := s.store.WorkItemsByIDPrefix(r.Context(), *prefix)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.WorkItemList{WorkItems: items})
}

// idPrefix reads the id_prefix filter of a list (nil when absent; given
// but empty or malformed is 400 validation_failed).
func idPrefix(r *http.Request) (*wire.IDPrefix, error) {
	q := r.URL.Query()
	if !q.Has("id_prefix") {
		return nil, nil
	}
	p, err := wire.ParseIDPrefix(q.Get("id_prefix"))
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func (s *Server) getWorkItem(w http.ResponseWriter, r *http.Request) {
	item, err := s.store.GetWorkItem(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, item)
}

func (s *Server) updateWorkItem(w http.ResponseWriter, r *http.Request) {
	var in wire.UpdateWorkItem
	err := decodeJSON(w, r, &in)
	if err == nil {
		err = in.Validate()
	}
	var item wire.WorkItem
	if err == nil {
		item, err = s.store.UpdateWorkItem(r.Context(), r.PathValue("id"), in)
	}
	if err != nil {
		// A bad id is a 404 whatever the body holds: a body refused
		// before the item was read is judged after looking it up. Only
		// a refusal pays for that read, not every edit.
		if !wire.HasCode(err, wire.CodeNotFound) {
			if _, gerr := s.store.GetWorkItem(r.Context(), r.PathValue("id")); wire.HasCode(gerr, wire.CodeNotFound) {
				err = gerr
			}
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, item)
}

func (s *Server) deleteWorkItem(w http.ResponseWriter, r *http.Request) {
	if err := s.store.DeleteWorkItem(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
