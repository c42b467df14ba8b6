package wire

import (
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Each request body validates itself (Validate): what can be told without
// the database, with the field each fault names. The server calls
// Validate before it hands the request to the store; what needs the
// database (a parent that exists, a slug that is free) is checked when
// the request is written.

// ValidName checks the 1–200 character rule of docs/api.md#resources for
// names and titles.
func ValidName(field, s string) error {
	n := utf8.RuneCountInString(s)
	if strings.TrimSpace(s) == "" || n > 200 {
		return Invalid(field, "%s must be 1 to 200 characters", field)
	}
	if !utf8.ValidString(s) || strings.ContainsAny(s, "\x00\n\r") {
		return Invalid(field, "%s must be one line of valid UTF-8", field)
	}
	return nil
}

// Work item kinds, ranked: a parent must rank strictly above its child
// (docs/architecture.md#data-model).
var kindRank = map[string]int{"milestone": 4, "epic": 3, "task": 2, "subtask": 1}

// KindRank is a work item kind's rank, 0 for no kind.
func KindRank(kind string) int { return kindRank[kind] }

// ValidKind reports whether k is a work item kind.
func ValidKind(k string) bool { _, ok := kindRank[k]; return ok }

// ValidItemStatus reports whether s is a work item status.
func ValidItemStatus(s string) bool {
	switch s {
	case "todo", "doing", "done", "cancelled":
		return true
	}
	return false
}

// MaxBody bounds a work item's body.
const MaxBody = 64 << 10

// validBody checks a work item's body: at most 64 KiB of UTF-8 without
// U+0000, which PostgreSQL's text refuses (a 400 naming the field, never
// a 500).
func validBody(body string) error {
	if len(body) > MaxBody {
		return Invalid("body", "body must be at most 64 KiB")
	}
	if !utf8.ValidString(body) || strings.ContainsRune(body, 0) {
		return Invalid("body", "body must be valid UTF-8 without U+0000")
	}
	return nil
}

func invalidKind() error {
	return Invalid("kind", "kind must be one of milestone, epic, task, subtask")
}

func invalidItemStatus() error {
	return Invalid("status", "status must be one of todo, doing, done, cancelled")
}

// Validate checks a new work item's kind, title, body and status.
func (r CreateWorkItem) Validate() error {
	if !ValidKind(r.Kind) {
		return invalidKind()
	}
	if err := ValidName("title", r.Title); err != nil {
		return err
	}
	if r.Body != nil {
		if err := validBody(*r.Body); err != nil {
			return err
		}
	}
	if r.Status != nil && !ValidItemStatus(*r.Status) {
		return invalidItemStatus()
	}
	return nil
}

// Validate checks the fields a work item update sets.
func (r UpdateWorkItem) Validate() error {
	if r.Title != nil {
		if err := ValidName("title", *r.Title); err != nil {
			return err
		}
	}
	if r.Body != nil {
		if err := validBody(*r.Body); err != nil {
			return err
		}
	}
	if r.Status != nil && !ValidItemStatus(*r.Status) {
		return invalidItemStatus()
	}
	if r.Position != nil && (*r.Position < 0 || *r.Position > 1_000_000) {
		return Invalid("position", "position must be between 0 and 1000000")
	}
	if r.ParentID.Set && r.ParentID.Value != nil && !ValidUUID(*r.ParentID.Value) {
		return Invalid("parent_id", "parent_id must be a UUID or null")
	}
	return nil
}

// ValidateItemFilter checks the status and kind a work item list is
// narrowed by (empty: any) and the parent's id.
func ValidateItemFilter(status, kind, parentID string) error {
	if status != "" && !ValidItemStatus(status) {
		return invalidItemStatus()
	}
	if kind != "" && !ValidKind(kind) {
		return invalidKind()
	}
	if parentID != "" && !ValidUUID(parentID) {
		return Invalid("parent_id", "parent_id must be a UUID")
	}
	return nil
}

// SlugRe is the form of a project's slug.
var SlugRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// MaxDescription bounds a project's description.
const MaxDescription = 64 << 10

// Validate checks a new project's name, slug and description; its repo
// is read by ValidateRepo when the project is written.
func (r CreateProject) Validate() error {
	if err := ValidName("name", r.Name); err != nil {
		return err
	}
	if r.Slug != nil && !SlugRe.MatchString(*r.Slug) {
		return Invalid("slug", "slug must match ^[a-z0-9][a-z0-9-]{0,62}$")
	}
	if r.Description != nil && len(*r.Description) > MaxDescription {
		return Invalid("description", "description must be at most 64 KiB")
	}
	return nil
}

// Validate checks the name and description a project update sets.
func (r UpdateProject) Validate() error {
	if r.Name != nil {
		if err := ValidName("name", *r.Name); err != nil {
			return err
		}
	}
	if r.Description != nil && len(*r.Description) > MaxDescription {
		return Invalid("description", "description must be at most 64 KiB")
	}
	return nil
}

// Validate checks a new channel: name, kind, an http(s) URL with a host,
// at least one valid topic glob.
func (r CreateChannel) Validate() error {
	if n := utf8.RuneCountInString(r.Name); n < 1 || n > 200 {
		return Invalid("name", "name must be 1-200 characters")
	}
	switch r.Kind {
	case ChannelWebhook, ChannelNtfy, ChannelSlack:
	default:
		return Invalid("kind", "kind must be webhook, ntfy or slack")
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(r.URL) > 2000 {
		return Invalid("url", "url must be an http:// or https:// URL")
	}
	if len(r.Events) == 0 || len(r.Events) > 50 {
		return Invalid("events", "events must list 1-50 topic globs, e.g. run.attention")
	}
	for _, g := range r.Events {
		if g == "" {
			return Invalid("events", "an empty topic glob")
		}
		if _, err := ParseTopicGlob(g); err != nil {
			return Invalid("events", "%v", err)
		}
	}
	if r.ProjectID != nil && !ValidUUID(*r.ProjectID) {
		return Invalid("project_id", "project_id must be a project's id")
	}
	return nil
}

// Validate checks a new token's name (1–200 characters of printable text:
// it is the actor of the events its holder causes, and what pam token
// revoke takes) and role.
func (r CreateToken) Validate() error {
	n := utf8.RuneCountInString(r.Name)
	if n < 1 || n > 200 || strings.TrimSpace(r.Name) != r.Name {
		return Invalid("name", "name must be 1 to 200 characters without leading or trailing spaces")
	}
	for _, c := range r.Name {
		if c < 0x20 || c == 0x7f {
			return Invalid("name", "name must not contain control characters")
		}
	}
	if RoleRank(r.Role) == 0 {
		return Invalid("role", "role must be admin, operator or viewer")
	}
	return nil
}

// HostNameRe is the form of a host's name.
var HostNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// MaxMaxRuns bounds a host's max_runs.
const MaxMaxRuns = 1000

// ValidHostName checks a host name against ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$.
func ValidHostName(name string) error {
	if !HostNameRe.MatchString(name) {
		return Invalid("name", "name must be a machine name: 1 to 63 letters, digits, dots, dashes or underscores, starting with a letter or digit")
	}
	return nil
}

// Validate checks a new host's name and max_runs.
func (r CreateHost) Validate() error {
	if err := ValidHostName(r.Name); err != nil {
		return err
	}
	if r.MaxRuns != nil && (*r.MaxRuns < 1 || *r.MaxRuns > MaxMaxRuns) {
		return Invalid("max_runs", "max_runs must be 1 to %d", MaxMaxRuns)
	}
	return nil
}

// Validate checks a host update: max_runs is required.
func (r UpdateHost) Validate() error {
	if r.MaxRuns == nil {
		return Invalid("max_runs", "max_runs is required")
	}
	if *r.MaxRuns < 1 || *r.MaxRuns > MaxMaxRuns {
		return Invalid("max_runs", "max_runs must be 1 to %d", MaxMaxRuns)
	}
	return nil
}

// Validate checks a signal's attempt, kind, source and payload. Attempts
// start at 1, refused here as on the uplink (Frame.Validate): each
// made-up attempt below 1 would otherwise be one more stale attempt to
// journal.
func (r Signal) Validate() error {
	if r.Attempt != nil && *r.Attempt < 1 {
		return Invalid("attempt", "attempt must be 1 or more")
	}
	if !IsSignalKind(r.Kind) {
		return Invalid("kind", "kind must be one of "+SignalKindList)
	}
	switch r.Source {
	case SourceWrapper, SourceProviderHook:
	case SourceManual:
		return Invalid("source", "source manual is produced by the public API, never accepted here")
	default:
		return Invalid("source", "source must be wrapper or provider-hook")
	}
	return CheckSignalPayload(r.Kind, r.Payload)
}

// Validate checks the text of an agent's progress note.
func (r AgentProgress) Validate() error {
	switch {
	case strings.TrimSpace(r.Text) == "":
		return Invalid("text", "text must not be empty")
	case len(r.Text) > MaxProgressText:
		return Invalid("text", "text must be at most %d bytes", MaxProgressText)
	case !utf8.ValidString(r.Text) || strings.ContainsRune(r.Text, 0):
		return Invalid("text", "text must be valid UTF-8 without U+0000")
	}
	return nil
}

// maxContinueMessage bounds a reported continue_message, as the catalog
// does: it is typed as a message.
const maxContinueMessage = 4096

// Validate checks a registration's fields (whether the token's host is
// the one named, and the protocol, are the server's to check first):
// the instance id, max_runs, the provider names, continue_messages (at
// most 64 providers of valid names, each text 1–4096 bytes of UTF-8
// without NUL) and the short strings.
func (r Register) Validate() error {
	if _, err := uuid.Parse(r.InstanceID); err != nil {
		return Invalid("instance_id", "instance_id must be a UUID")
	}
	if r.MaxRuns < 0 || r.MaxRuns > 1000 {
		return Invalid("max_runs", "max_runs must be between 0 and 1000")
	}
	if err := validProviderList("providers", r.Providers); err != nil {
		return err
	}
	if err := validProviderList("resumable", r.Resumable); err != nil {
		return err
	}
	if len(r.ContinueMessages) > 64 {
		return Invalid("continue_messages", "at most 64 providers")
	}
	for p, text := range r.ContinueMessages {
		if !ValidProviderName(p) {
			return Invalid("continue_messages", "provider %q is not a valid name", p)
		}
		if text == "" || len(text) > maxContinueMessage || strings.ContainsRune(text, 0) || !utf8.ValidString(text) {
			return Invalid("continue_messages", "the continue_message of %q must be 1-%d bytes of UTF-8 without NUL", p, maxContinueMessage)
		}
	}
	if len(r.Platform) > 64 || len(r.Executor) > 16 || len(r.Version) > 64 {
		return Invalid("platform", "platform, executor and version are short strings")
	}
	return nil
}

func validProviderList(field string, names []string) error {
	if len(names) > 64 {
		return Invalid(field, "at most 64 providers")
	}
	for _, p := range names {
		if !ValidProviderName(p) {
			return Invalid(field, "provider %q is not a valid name", p)
		}
	}
	return nil
}

// Validate checks an agent's new work item: the parent's id when one is
// given, then what CreateWorkItem.Validate checks (the kind defaults to
// the run's item's, which is valid).
func (r AgentCreateWorkItem) Validate() error {
	if r.ParentID.Set && r.ParentID.Value != nil && !ValidUUID(*r.ParentID.Value) {
		return Invalid("parent_id", "parent_id must be a work item id, or null for the project's top level")
	}
	c := CreateWorkItem{Kind: "task", Title: r.Title, Body: r.Body}
	if r.Kind != nil {
		c.Kind = *r.Kind
	}
	return c.Validate()
}

// Validate checks the title, body and status an agent's update sets.
func (r AgentUpdateWorkItem) Validate() error {
	return UpdateWorkItem{Title: r.Title, Body: r.Body, Status: r.Status}.Validate()
}
