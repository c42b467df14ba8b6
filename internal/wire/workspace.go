package wire

import (
	"encoding/json"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Workspaces: a git worktree per run (docs/architecture.md#workspaces).

// Repo is a project's repository, projects.repo: URL is anything `git
// clone` takes (a remote URL, or an absolute path on the hosts), Base the
// ref runs branch from ("" = the remote's default branch).
type Repo struct {
	URL  string `json:"url"`
	Base string `json:"base"`
}

// RepoInput is the repo of POST and PATCH /projects: base may be left out.
type RepoInput struct {
	URL  string  `json:"url"`
	Base *string `json:"base,omitempty"`
}

// Workspace is the worktree a worker made for a run, runs.workspace:
// where it is on its host, the run's branch, and the commit it branched
// from (what a diff is relative to).
type Workspace struct {
	Path       string `json:"path"`
	Branch     string `json:"branch"`
	BaseCommit string `json:"base_commit"`
}

// Workspace modes of POST /runs.
const (
	WorkspaceWorktree = "worktree"
	WorkspaceNone     = "none"
)

// DiffFile is one file of GET /runs/{id}/diff?stat=true. Added and
// Deleted are null for a binary file (git's numstat prints "-").
type DiffFile struct {
	Path    string `json:"path"`
	Added   *int   `json:"added"`
	Deleted *int   `json:"deleted"`
	// Status is added, modified, deleted or typechange.
	Status string `json:"status"`
	// Committed: the file is of the committed part (base_commit..head,
	// what a push sends); false for the uncommitted part (head to the
	// working tree). A file changed in both parts is listed once in each.
	Committed bool `json:"committed"`
}

// DiffStat is the body of GET /runs/{id}/diff?stat=true. Head is the
// commit the run's branch was at when the diff was taken: what a push
// of what was shown names.
type DiffStat struct {
	Head  string     `json:"head"`
	Files []DiffFile `json:"files"`
}

// Parts of a diff (GET /runs/{id}/diff?part=): the commits on the run's
// branch (base_commit..head, what a push sends), or what its working
// tree holds beyond them (staged, unstaged and untracked files). No part
// is both, the committed part first.
const (
	DiffPartCommitted   = "committed"
	DiffPartUncommitted = "uncommitted"
)

// HeadHeader names, on a text diff, the commit the run's branch was at
// when it was taken (the stat's head).
const HeadHeader = "Pam-Head"

// PushInput is the body of POST /runs/{id}/push: Commit, when given, is
// the head the person reviewed; the push is refused head_moved when the
// branch is at another commit.
type PushInput struct {
	Commit *string `json:"commit,omitempty"`
}

// PushResult is the body of POST /runs/{id}/push: what the worker's push
// did, as journaled in run.workspace_pushed. Commit is what was pushed.
type PushResult struct {
	RunID  string `json:"run_id"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// ValidCommit reports whether s is a full commit id (SHA-1 or SHA-256).
func ValidCommit(s string) bool { return commitRe.MatchString(s) }

// Workspace error codes (docs/api.md#resources).
const (
	// CodeNoWorkspace: the run has no worktree (none was asked for, it is
	// not made yet, or it was removed).
	CodeNoWorkspace = "no_workspace"
	// CodeHostUnreachable: the host holding the worktree is not connected.
	CodeHostUnreachable = "host_unreachable"
	// CodeHeadMoved: a push named a commit (what was reviewed) and the
	// run's branch is at another one now; nothing was pushed.
	CodeHeadMoved = "head_moved"
)

// FailWorkspaceFailed is the failure reason of an attempt whose worktree
// could not be made.
const FailWorkspaceFailed = "workspace_failed"

// StateWorkspaceFailed is the run_state a worker reports when it could not
// make a run's worktree; the attempt fails workspace_failed.
const StateWorkspaceFailed = "workspace_failed"

// Workspace uplink frames. Orchestrator → worker: workspace_request asks
// for a diff, a stat, a push or a removal of a run's worktree. Worker →
// orchestrator: workspace_reply answers it (text chunks until eof, or an
// error code), workspace_ready reports a worktree made for an attempt,
// workspace_removed one removed (asked for, or by clean-up),
// workspace_pushed the outcome of a push.
const (
	FrameWorkspaceRequest = "workspace_request"
	FrameWorkspaceReply   = "workspace_reply"
	FrameWorkspaceReady   = "workspace_ready"
	FrameWorkspaceRemoved = "workspace_removed"
	FrameWorkspacePushed  = "workspace_pushed"
)

// Operations of workspace_request.
const (
	WorkspaceOpDiff   = "diff"
	WorkspaceOpStat   = "stat"
	WorkspaceOpPush   = "push"
	WorkspaceOpRemove = "remove"
)

// MaxDiff bounds a diff: past it the worker stops and ends the text with
// a notice.
const MaxDiff = 8 << 20

// MaxRepoURL bounds a repository URL and MaxRef a ref or branch name.
const (
	MaxRepoURL = 2048
	MaxRef     = 255
)

var scpLikeRe = regexp.MustCompile(`^([A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:[^/\\]`)

// ValidateRepoURL checks a repository URL before it is stored or reaches
// git's argv: one line, no leading '-', a transport git keeps safe
// (https, http, ssh, git, file, scp-like user@host:path, or an absolute
// path), and no credentials inside — a password, or any user on http(s),
// belongs to the host's git credential helper, never to pam's database.
func ValidateRepoURL(u string) error {
	if u == "" || len(u) > MaxRepoURL || !utf8.ValidString(u) {
		return Invalid("repo.url", "repo.url must be 1 to %d bytes of UTF-8", MaxRepoURL)
	}
	if strings.HasPrefix(u, "-") {
		return Invalid("repo.url", "repo.url must not start with '-'")
	}
	for _, r := range u {
		if r < 0x20 || r == 0x7f || r == ' ' {
			return Invalid("repo.url", "repo.url must not contain spaces or control characters")
		}
	}
	if filepath.IsAbs(u) {
		return nil
	}
	if strings.Contains(u, "::") {
		return Invalid("repo.url", "repo.url: remote helpers (<transport>::<address>) are not allowed")
	}
	if i := strings.Index(u, "://"); i > 0 {
		p, err := url.Parse(u)
		if err != nil {
			return Invalid("repo.url", "repo.url: %v", err)
		}
		switch p.Scheme {
		case "https", "http", "ssh", "git", "file":
		default:
			return Invalid("repo.url", "repo.url scheme %q is not one of https, http, ssh, git, file", p.Scheme)
		}
		if p.User != nil {
			if _, hasPass := p.User.Password(); hasPass || p.Scheme == "https" || p.Scheme == "http" {
				return Invalid("repo.url", "repo.url must not carry credentials: configure the hosts' git credential helper instead")
			}
		}
		if p.Host == "" && p.Scheme != "file" {
			return Invalid("repo.url", "repo.url has no host")
		}
		return nil
	}
	if scpLikeRe.MatchString(u) {
		if at := strings.Index(u, "@"); at >= 0 && strings.Contains(u[:at], ":") {
			return Invalid("repo.url", "repo.url must not carry credentials: configure the hosts' git credential helper instead")
		}
		return nil
	}
	return Invalid("repo.url", "repo.url must be a URL (https://, ssh://, git://, file://), user@host:path, or an absolute path")
}

// ValidateRef checks a ref name (a project's base, a run's branch) by
// git's check-ref-format rules, and more strictly: never a leading '-',
// never something git would read as an option or a revision expression.
func ValidateRef(field, name string) error {
	bad := func(why string) error { return Invalid(field, "%s %q %s", field, name, why) }
	if name == "" || len(name) > MaxRef {
		return Invalid(field, "%s must be 1 to %d bytes", field, MaxRef)
	}
	if strings.HasPrefix(name, "-") {
		return bad("must not start with '-'")
	}
	if name == "@" || strings.Contains(name, "@{") || strings.Contains(name, "..") || strings.Contains(name, "//") {
		return bad("is not a valid ref name")
	}
	if strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock") {
		return bad("is not a valid ref name")
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") || strings.HasPrefix(part, "-") || strings.HasSuffix(part, ".lock") {
			return bad("is not a valid ref name")
		}
	}
	for _, r := range name {
		if r < 0x21 || r == 0x7f || strings.ContainsRune("~^:?*[\\", r) {
			return bad("is not a valid ref name")
		}
	}
	return nil
}

// ValidateRepo checks a repo as POST and PATCH /projects take it.
func ValidateRepo(in RepoInput) (Repo, error) {
	if err := ValidateRepoURL(in.URL); err != nil {
		return Repo{}, err
	}
	r := Repo{URL: in.URL}
	if in.Base != nil && *in.Base != "" {
		if err := ValidateRef("repo.base", *in.Base); err != nil {
			return Repo{}, err
		}
		r.Base = *in.Base
	}
	return r, nil
}

// ValidateWorkspace checks a worktree as frames carry it: an absolute
// path, a valid branch, a full commit id (or none, in a dispatch).
func ValidateWorkspace(ws *Workspace, needPath bool) error {
	if ws == nil {
		return Invalid("workspace", "workspace is missing")
	}
	if needPath || ws.Path != "" {
		if len(ws.Path) > MaxPath || !filepath.IsAbs(ws.Path) || strings.ContainsRune(ws.Path, 0) {
			return Invalid("workspace.path", "workspace.path must be an absolute path of at most %d bytes", MaxPath)
		}
	}
	if err := ValidateRef("workspace.branch", ws.Branch); err != nil {
		return err
	}
	if (needPath || ws.BaseCommit != "") && !commitRe.MatchString(ws.BaseCommit) {
		return Invalid("workspace.base_commit", "workspace.base_commit must be a full hexadecimal commit id")
	}
	return nil
}

var commitRe = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// checkDispatchWorkspace: a run_dispatch that wants a worktree carries
// the planned workspace (branch, and base_commit on a later attempt); it
// carries the project's repo and id unless the repo was removed since
// (the worker then fails the attempt workspace_failed).
func checkDispatchWorkspace(f RunDispatchFrame) error {
	if f.Workspace == nil {
		if f.Repo != nil || f.ProjectID != "" {
			return Invalid("workspace", "repo and project_id come with a workspace")
		}
		return nil
	}
	if err := ValidateWorkspace(f.Workspace, false); err != nil {
		return err
	}
	if f.Repo == nil {
		return nil
	}
	if err := needUUID("project_id", f.ProjectID); err != nil {
		return err
	}
	if err := ValidateRepoURL(f.Repo.URL); err != nil {
		return err
	}
	if f.Repo.Base != "" {
		return ValidateRef("repo.base", f.Repo.Base)
	}
	return nil
}

func (f WorkspaceRequestFrame) check() error {
	if err := needUUID("request_id", f.RequestID); err != nil {
		return err
	}
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	switch f.Part {
	case "", DiffPartCommitted, DiffPartUncommitted:
	default:
		return Invalid("part", "part %s is not one of committed, uncommitted", quote(f.Part))
	}
	if f.Commit != "" && !ValidCommit(f.Commit) {
		return Invalid("commit", "commit must be a full hexadecimal commit id")
	}
	switch f.Op {
	case WorkspaceOpDiff, WorkspaceOpStat:
		if f.Commit != "" {
			return Invalid("commit", "commit is for op push")
		}
		return nil
	case WorkspaceOpPush, WorkspaceOpRemove:
		if f.Part != "" {
			return Invalid("part", "part is for ops diff and stat")
		}
		if f.Op == WorkspaceOpRemove && f.Commit != "" {
			return Invalid("commit", "commit is for op push")
		}
		return nil
	}
	return Invalid("op", "op %s is not one of diff, stat, push, remove", quote(f.Op))
}

func (f WorkspaceReplyFrame) check() error {
	if err := needUUID("request_id", f.RequestID); err != nil {
		return err
	}
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if len(f.Text) > MaxLogChunk {
		return Invalid("text", "text must be at most %d bytes", MaxLogChunk)
	}
	if f.Commit != "" && !ValidCommit(f.Commit) {
		return Invalid("commit", "commit must be a full hexadecimal commit id")
	}
	if f.Code != "" {
		if err := checkCode(f.Code); err != nil {
			return err
		}
	}
	return checkText("message", f.Message, MaxText)
}

func (f WorkspaceReadyFrame) check() error {
	if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
		return err
	}
	return ValidateWorkspace(f.Workspace, true)
}

func (f WorkspaceRemovedFrame) check() error {
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if err := ValidateWorkspace(f.Workspace, true); err != nil {
		return err
	}
	return checkText("reason", f.Reason, MaxText)
}

func (f WorkspacePushedFrame) check() error {
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if err := ValidateWorkspace(f.Workspace, true); err != nil {
		return err
	}
	if f.OK == nil {
		return Invalid("ok", "ok is missing")
	}
	return checkText("detail", f.Detail, MaxText)
}

// OptionalRepo is PATCH /projects' repo: it remembers whether it was in
// the JSON at all, so that "repo": null (remove it) differs from no repo
// (keep it).
type OptionalRepo struct {
	Set   bool
	Value *RepoInput
}

// UnmarshalJSON records presence and decodes strictly (an unknown field
// inside repo is refused like one outside).
func (o *OptionalRepo) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Value = nil
		return nil
	}
	var r RepoInput
	if err := decodeStrictBytes(b, &r); err != nil {
		return err
	}
	o.Value = &r
	return nil
}

// MarshalJSON writes the value or null.
func (o OptionalRepo) MarshalJSON() ([]byte, error) {
	if o.Value == nil {
		return []byte("null"), nil
	}
	return json.Marshal(*o.Value)
}

// IsZero lets omitzero drop an absent OptionalRepo when encoding.
func (o OptionalRepo) IsZero() bool { return !o.Set }
