// The checks of every uplink frame, by type. Past 600 lines because it
// is one table of rules per frame type over the one catch-all Frame; it
// shrinks when each frame type becomes a struct with its own Validate.

package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Bounds of uplink frame fields. Both ends hold every frame to them, so a
// peer's bug is refused at the edge instead of reaching tmux, a file or
// the database.
const (
	// MaxText bounds the free text a frame carries (run_state detail,
	// reason, message), in characters: every free-text field stored from a
	// worker is bounded (docs/architecture.md#security-model).
	MaxText = 1000
	// MaxPrompt bounds a run's prompt (docs/architecture.md#data-model).
	MaxPrompt = 64 << 10
	// MaxArgs and MaxArg bound a run's extra arguments, as POST /runs does.
	MaxArgs = 64
	MaxArg  = 4096
	// MaxPath bounds a run's cwd.
	MaxPath = 4096
	// MaxTitle bounds a task title (names are 1–200 characters, docs/api.md#resources).
	MaxTitle = 200
	// MaxToken bounds a signal token: it travels in an HTTP header.
	MaxToken = 256
	// MaxPayload bounds a signal's payload.
	MaxPayload = 64 << 10
	// MaxProgressPayload bounds a progress signal's payload: progress
	// comes often and each may be journaled (docs/architecture.md#bounded-journal).
	MaxProgressPayload = 4 << 10
	// MaxCapture bounds a snapshot's capture: what one frame can carry.
	// The check is explicit so that a frame built in memory is held to it
	// as a decoded one is.
	MaxCapture = MaxFrame
	// MaxLogChunk bounds the text of one log_chunk.
	MaxLogChunk = 256 << 10
	// MaxAttachChunk bounds the bytes of one attach_input or
	// attach_output (the relays send at most 32 KiB at a time).
	MaxAttachChunk = 256 << 10
	// maxCode bounds an error code; maxEcho bounds the fields an error
	// answer echoes from the frame it refuses.
	maxCode = 64
	maxEcho = 64
)

var (
	sessionNameRe = regexp.MustCompile(`^pam-[0-9a-f]{8}$`)
	providerRe    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	codeRe        = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// frameRule is what Validate holds one frame type to: the fields it may
// carry (docs/architecture.md#internal-api) and the stateless rules of their values.
type frameRule struct {
	fields string
	check  func(*Frame) error
}

// frameChecks holds the rules of each uplink frame type; its keys are the
// frame types pam knows. An error answer names the run of the frame it
// refuses (error's run_id), and a refused signal's answer carries the
// error's code and message (signal_ack's code and message).
var frameChecks = map[string]frameRule{
	// Orchestrator → worker.
	FrameHeartbeatAck: {"timestamp", checkHeartbeatAck},
	FrameRunDispatch:  {"run_id task_id provider session_name attempt cwd prompt args task_title signal_token repo project_id workspace agent_session_id text", checkRunDispatch},
	FrameRunStop:      {"run_id attempt force", checkRunStop},
	FrameSendKeys:     {"run_id attempt keys", checkSendKeys},
	FrameSignalAck:    {"run_id attempt kind seq result code message", checkSignalAck},
	FrameAttachOpen:   {"attach_id run_id session_name rows cols", checkAttachOpen},
	FrameAttachInput:  {"attach_id bytes", checkAttachInput},
	FrameAttachResize: {"attach_id rows cols", checkAttachResize},
	FrameAttachClose:  {"attach_id", checkAttachClose},
	FrameLogRequest:   {"request_id run_id offset", checkLogRequest},
	FrameError:        {"code message run_id", checkError},
	FramePaneWatch:    {"run_id attempt", checkRunAttempt},
	// Worker → orchestrator.
	FrameHeartbeat:      {"host_id instance_id timestamp", checkHeartbeat},
	FrameRunDispatchAck: {"run_id attempt accepted reason", checkRunDispatchAck},
	FrameSnapshot:       {"run_id attempt capture timestamp", checkSnapshot},
	FrameSignal:         {"run_id kind attempt seq source payload timestamp", checkSignal},
	FrameLogChunk:       {"run_id text timestamp request_id eof", checkLogChunk},
	FrameRunState:       {"run_id attempt state detail", checkRunState},
	FrameAttachOutput:   {"attach_id bytes", checkAttachOutput},
	FrameAttachClosed:   {"attach_id reason", checkAttachClosed},
	FrameScreen:         {"run_id attempt attention working text choices resets_at", checkScreen},
	// Workspaces, both ways (workspace.go).
	FrameWorkspaceRequest: {"request_id run_id op part commit", checkWorkspaceRequest},
	FrameWorkspaceReply:   {"request_id run_id text eof code message commit", checkWorkspaceReply},
	FrameWorkspaceReady:   {"run_id attempt workspace", checkWorkspaceReady},
	FrameWorkspaceRemoved: {"run_id workspace reason", checkWorkspaceRemoved},
	FrameWorkspacePushed:  {"run_id workspace ok detail", checkWorkspacePushed},
}

// frameField tells whether a frame carries one field, by its JSON name
// (a zero value is not carried: it is not encoded).
type frameField struct {
	name string
	set  func(*Frame) bool
}

// frameFields lists every field of Frame but type.
var frameFields = []frameField{
	{"run_id", func(f *Frame) bool { return f.RunID != "" }},
	{"attempt", func(f *Frame) bool { return f.Attempt != nil }},
	{"timestamp", func(f *Frame) bool { return f.Timestamp != nil }},
	{"host_id", func(f *Frame) bool { return f.HostID != "" }},
	{"instance_id", func(f *Frame) bool { return f.InstanceID != "" }},
	{"task_id", func(f *Frame) bool { return f.TaskID != "" }},
	{"provider", func(f *Frame) bool { return f.Provider != "" }},
	{"session_name", func(f *Frame) bool { return f.SessionName != "" }},
	{"cwd", func(f *Frame) bool { return f.Cwd != "" }},
	{"prompt", func(f *Frame) bool { return f.Prompt != "" }},
	{"args", func(f *Frame) bool { return len(f.Args) > 0 }},
	{"task_title", func(f *Frame) bool { return f.TaskTitle != "" }},
	{"signal_token", func(f *Frame) bool { return f.SignalToken != "" }},
	{"accepted", func(f *Frame) bool { return f.Accepted != nil }},
	{"reason", func(f *Frame) bool { return f.Reason != "" }},
	{"force", func(f *Frame) bool { return f.Force }},
	{"keys", func(f *Frame) bool { return len(f.Keys) > 0 }},
	{"kind", func(f *Frame) bool { return f.Kind != "" }},
	{"seq", func(f *Frame) bool { return f.Seq != nil }},
	{"source", func(f *Frame) bool { return f.Source != "" }},
	{"payload", func(f *Frame) bool { return len(f.Payload) > 0 }},
	{"result", func(f *Frame) bool { return f.Result != "" }},
	{"capture", func(f *Frame) bool { return f.Capture != "" }},
	{"text", func(f *Frame) bool { return f.Text != "" }},
	{"request_id", func(f *Frame) bool { return f.RequestID != "" }},
	{"offset", func(f *Frame) bool { return f.Offset != nil }},
	{"eof", func(f *Frame) bool { return f.EOF }},
	{"state", func(f *Frame) bool { return f.State != "" }},
	{"detail", func(f *Frame) bool { return f.Detail != "" }},
	{"attach_id", func(f *Frame) bool { return f.AttachID != "" }},
	{"bytes", func(f *Frame) bool { return len(f.Bytes) > 0 }},
	{"rows", func(f *Frame) bool { return f.Rows != 0 }},
	{"cols", func(f *Frame) bool { return f.Cols != 0 }},
	{"code", func(f *Frame) bool { return f.Code != "" }},
	{"message", func(f *Frame) bool { return f.Message != "" }},
	{"op", func(f *Frame) bool { return f.Op != "" }},
	{"repo", func(f *Frame) bool { return f.Repo != nil }},
	{"project_id", func(f *Frame) bool { return f.ProjectID != "" }},
	{"workspace", func(f *Frame) bool { return f.Workspace != nil }},
	{"ok", func(f *Frame) bool { return f.OK != nil }},
	{"part", func(f *Frame) bool { return f.Part != "" }},
	{"commit", func(f *Frame) bool { return f.Commit != "" }},
	{"attention", func(f *Frame) bool { return f.Attention != "" }},
	{"working", func(f *Frame) bool { return f.Working }},
	{"choices", func(f *Frame) bool { return len(f.Choices) > 0 }},
	{"resets_at", func(f *Frame) bool { return f.ResetsAt != nil }},
	{"agent_session_id", func(f *Frame) bool { return f.AgentSessionID != "" }},
}

// Validate checks everything about f that needs no state: it carries only
// the fields of its type, ids are UUIDs, attempts are 1 or more, enums
// hold known values, session names are pam-<8 hex> and the run's own,
// sizes and free text are bounded. What it accepts can be handed to tmux,
// a file or the database without another look; what it refuses is
// answered and dropped (docs/architecture.md#internal-api). The error is a *Error naming the field
// (validation_failed, or key_not_allowed for send_keys), its message
// starting with the frame type.
func (f Frame) Validate() error {
	rule, ok := frameChecks[f.Type]
	if !ok {
		return Invalid("type", "unknown frame type %s", quote(f.Type))
	}
	allowed := strings.Fields(rule.fields)
	for _, field := range frameFields {
		if field.set(&f) && !slices.Contains(allowed, field.name) {
			return framed(f.Type, Invalid(field.name, "%s is not a field of this frame", field.name))
		}
	}
	if err := checkTimestamp(f.Timestamp); err != nil {
		return framed(f.Type, err)
	}
	return framed(f.Type, rule.check(&f))
}

// framed prefixes the message of a frame's validation error with its type.
func framed(typ string, err error) error {
	if err == nil {
		return nil
	}
	e, ok := AsError(err)
	if !ok {
		return fmt.Errorf("%s: %w", typ, err)
	}
	c := *e
	c.Message = typ + ": " + e.Message
	return &c
}

func checkHeartbeatAck(*Frame) error { return nil }

func checkRunDispatch(f *Frame) error {
	if err := checkRunAttempt(f); err != nil {
		return err
	}
	if err := checkSession(f.RunID, f.SessionName); err != nil {
		return err
	}
	if err := needUUID("task_id", f.TaskID); err != nil {
		return err
	}
	if !providerRe.MatchString(f.Provider) {
		return Invalid("provider", "provider %s does not match ^[a-z][a-z0-9_-]{0,31}$", quote(f.Provider))
	}
	if len(f.Cwd) > MaxPath || strings.ContainsRune(f.Cwd, 0) || (f.Cwd != "" && !filepath.IsAbs(f.Cwd)) {
		return Invalid("cwd", "cwd must be empty or an absolute path of at most %d bytes", MaxPath)
	}
	if len(f.Prompt) > MaxPrompt || strings.ContainsRune(f.Prompt, 0) {
		return Invalid("prompt", "prompt must be at most %d bytes without NUL", MaxPrompt)
	}
	if len(f.Args) > MaxArgs {
		return Invalid("args", "at most %d args", MaxArgs)
	}
	for i, a := range f.Args {
		if len(a) > MaxArg || strings.ContainsRune(a, 0) {
			return Invalid("args", "args[%d] must be at most %d bytes without NUL", i, MaxArg)
		}
	}
	if err := checkText("task_title", f.TaskTitle, MaxTitle); err != nil {
		return err
	}
	if f.SignalToken == "" || len(f.SignalToken) > MaxToken || !printableASCII(f.SignalToken) {
		return Invalid("signal_token", "signal_token must be 1 to %d printable ASCII characters", MaxToken)
	}
	if err := checkDispatchResume(f); err != nil {
		return err
	}
	return checkDispatchWorkspace(f)
}

// checkDispatchResume: a run_dispatch that asks for a resume names a
// valid session id; its message (text) comes only with one.
func checkDispatchResume(f *Frame) error {
	if f.AgentSessionID == "" {
		if f.Text != "" {
			return Invalid("text", "text (the message of a resume) comes with an agent_session_id")
		}
		return nil
	}
	if err := ValidAgentSessionID(f.AgentSessionID); err != nil {
		return Invalid("agent_session_id", "%s", err.(*Error).Message)
	}
	if f.Text != "" {
		return CheckContinueText(f.Text)
	}
	return nil
}

func checkRunStop(f *Frame) error { return checkRunAttempt(f) }

func checkSendKeys(f *Frame) error {
	if err := checkRunAttempt(f); err != nil {
		return err
	}
	return ValidateKeys(f.Keys)
}

// checkSignalAck: an answer with a result echoes a valid signal; an error
// answer (code set) echoes whatever was refused, bounded.
func checkSignalAck(f *Frame) error {
	if f.Code != "" {
		if err := checkCode(f.Code); err != nil {
			return err
		}
		if err := checkText("message", f.Message, MaxText); err != nil {
			return err
		}
		for _, e := range []struct{ field, v string }{{"run_id", f.RunID}, {"kind", f.Kind}, {"result", f.Result}} {
			if len(e.v) > maxEcho {
				return Invalid(e.field, "an error answer echoes at most %d bytes of %s", maxEcho, e.field)
			}
		}
		return nil
	}
	if err := checkRunAttempt(f); err != nil {
		return err
	}
	if !IsSignalKind(f.Kind) {
		return Invalid("kind", "kind %s is not one of "+SignalKindList, quote(f.Kind))
	}
	if err := checkSeq(f.Seq); err != nil {
		return err
	}
	switch f.Result {
	case ResultApplied, ResultStaleAttempt, ResultDuplicate, ResultOutOfOrder, ResultStaleOffer, ResultIgnored:
		return nil
	}
	return Invalid("result", "result %s is not a signal result (or the answer needs a code)", quote(f.Result))
}

func checkAttachOpen(f *Frame) error {
	if err := needUUID("attach_id", f.AttachID); err != nil {
		return err
	}
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if err := checkSession(f.RunID, f.SessionName); err != nil {
		return err
	}
	// No size at all means the worker's default (24×80).
	if f.Rows == 0 && f.Cols == 0 {
		return nil
	}
	return checkTermSize(f.Rows, f.Cols)
}

func checkAttachInput(f *Frame) error { return checkAttachBytes(f) }

func checkAttachResize(f *Frame) error {
	if err := needUUID("attach_id", f.AttachID); err != nil {
		return err
	}
	return checkTermSize(f.Rows, f.Cols)
}

func checkAttachClose(f *Frame) error { return needUUID("attach_id", f.AttachID) }

func checkLogRequest(f *Frame) error {
	if err := needUUID("request_id", f.RequestID); err != nil {
		return err
	}
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if f.Offset != nil && *f.Offset < 0 {
		return Invalid("offset", "offset must not be negative")
	}
	return nil
}

// checkError: run_id, when an error names the run of the frame it
// refuses, is a valid one (an invalid one is left out).
func checkError(f *Frame) error {
	if err := checkCode(f.Code); err != nil {
		return err
	}
	if err := checkText("message", f.Message, MaxText); err != nil {
		return err
	}
	if f.RunID != "" {
		return needUUID("run_id", f.RunID)
	}
	return nil
}

// checkHeartbeat: the orchestrator knows the host by its token, so both
// ids are information; present, they are ids. The instance id takes any
// form registration takes.
func checkHeartbeat(f *Frame) error {
	if f.HostID != "" {
		if err := needUUID("host_id", f.HostID); err != nil {
			return err
		}
	}
	if f.InstanceID != "" {
		if _, err := uuid.Parse(f.InstanceID); err != nil {
			return Invalid("instance_id", "instance_id %s is not a UUID", quote(f.InstanceID))
		}
	}
	return nil
}

func checkRunDispatchAck(f *Frame) error {
	if err := checkRunAttempt(f); err != nil {
		return err
	}
	if f.Accepted == nil {
		return Invalid("accepted", "accepted is required")
	}
	return checkText("reason", f.Reason, MaxText)
}

func checkSnapshot(f *Frame) error {
	if err := checkRunAttempt(f); err != nil {
		return err
	}
	if len(f.Capture) > MaxCapture {
		return Invalid("capture", "capture must be at most %d bytes", MaxCapture)
	}
	return nil
}

// checkSignal applies the stateless rules of a signal (docs/architecture.md#internal-api). A missing
// attempt passes: its answer (missing_attempt) names the run's current
// attempt, which takes the database, as do missing_seq and the rules of
// each kind's payload, which ingest checks in the normative order.
func checkSignal(f *Frame) error {
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if f.Attempt != nil && *f.Attempt < 1 {
		return Invalid("attempt", "attempt must be 1 or more")
	}
	if !IsSignalKind(f.Kind) {
		return Invalid("kind", "kind must be one of "+SignalKindList)
	}
	switch f.Source {
	case SourceWrapper, SourceProviderHook:
	case SourceManual:
		return Invalid("source", "source manual is produced by the public API, never accepted here")
	default:
		return Invalid("source", "source must be wrapper or provider-hook")
	}
	if err := checkSeq(f.Seq); err != nil {
		return err
	}
	return CheckSignalPayload(f.Kind, f.Payload)
}

// CheckSignalPayload is CheckPayload for a signal of kind: a progress
// signal's payload is held to MaxProgressPayload bytes besides, and a
// bigger one is refused (validation_failed), never cut: a cut payload
// would not be JSON, and a journal entry that says less than its sender
// meant is worse than an answer that says why.
func CheckSignalPayload(kind string, p json.RawMessage) error {
	if kind == SignalProgress && len(p) > MaxProgressPayload {
		return Invalid("payload", "a progress signal's payload must be at most 4 KiB")
	}
	return CheckPayload(p)
}

// CheckPayload applies the bounds of a signal's payload on both
// transports: at most MaxPayload bytes of JSON, and, because the payload
// is journaled as it came, every string in it (key or value) free text of
// at most MaxText characters without NUL (docs/architecture.md#security-model).
func CheckPayload(p json.RawMessage) error {
	if len(p) == 0 {
		return nil
	}
	if len(p) > MaxPayload {
		return Invalid("payload", "payload must be at most 64 KiB")
	}
	if !json.Valid(p) {
		return Invalid("payload", "payload must be JSON")
	}
	if jsonHoldsNUL(p) {
		return Invalid("payload", "payload must not hold a NUL character")
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return Invalid("payload", "payload must be JSON")
		}
		if s, ok := tok.(string); ok && utf8.RuneCountInString(s) > MaxText {
			return Invalid("payload", "every string of a payload must be at most %d characters", MaxText)
		}
	}
}

func checkLogChunk(f *Frame) error {
	if err := needUUID("request_id", f.RequestID); err != nil {
		return err
	}
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if len(f.Text) > MaxLogChunk {
		return Invalid("text", "text must be at most %d bytes", MaxLogChunk)
	}
	return nil
}

// checkRunState: orphan_detected may name no run (a session that maps to
// no run of the host), and then no attempt either.
func checkRunState(f *Frame) error {
	switch f.State {
	case StateSessionLost, StateSpawnFailed, StateTmuxCrash, StateStaleSession, StateOrphanDetected, StateWrapperDied, StateIdle, StateWorkspaceFailed:
	default:
		return Invalid("state", "state %s is not one of session_lost, spawn_failed, tmux_crash, stale_session, orphan_detected, wrapper_died, idle, workspace_failed", quote(f.State))
	}
	if f.State == StateOrphanDetected && f.RunID == "" {
		if f.Attempt != nil {
			return Invalid("attempt", "an orphan without a run has no attempt")
		}
	} else if err := checkRunAttempt(f); err != nil {
		return err
	}
	return checkText("detail", f.Detail, MaxText)
}

// checkScreen: a reading asks (needs_input, rate_limited) or it does not
// (none, perhaps working); what it asks is plain text within the bounds
// of attention_detail, so that it can be stored and shown as it is.
func checkScreen(f *Frame) error {
	if err := checkRunAttempt(f); err != nil {
		return err
	}
	switch f.Attention {
	case AttentionNeedsInput, AttentionRateLimited:
		if f.Working {
			return Invalid("working", "a screen that asks is not working")
		}
	case AttentionNone:
		if f.Text != "" || len(f.Choices) > 0 || f.ResetsAt != nil {
			return Invalid("attention", "a screen that asks nothing has no text, choices or resets_at")
		}
	default:
		return Invalid("attention", "attention %s is not none, needs_input or rate_limited", quote(f.Attention))
	}
	if err := CheckAttentionText("text", f.Text, true); err != nil {
		return err
	}
	if len(f.Choices) > MaxChoices {
		return Invalid("choices", "at most %d choices", MaxChoices)
	}
	seen := map[string]bool{}
	for i, c := range f.Choices {
		if !ValidChoiceKey(c.Key) || seen[c.Key] {
			return Invalid("choices", "choices[%d]: key %s is not one of 0-9, y, n (each once)", i, quote(c.Key))
		}
		seen[c.Key] = true
		if c.Label == "" {
			return Invalid("choices", "choices[%d]: label is empty", i)
		}
		if err := CheckAttentionText("choices", c.Label, false); err != nil {
			return err
		}
	}
	return checkTimestamp(f.ResetsAt)
}

func checkAttachOutput(f *Frame) error { return checkAttachBytes(f) }

func checkAttachClosed(f *Frame) error {
	if err := needUUID("attach_id", f.AttachID); err != nil {
		return err
	}
	return checkText("reason", f.Reason, MaxText)
}

// checkRunAttempt: run_id is a run's id and attempt is set, 1 or more.
func checkRunAttempt(f *Frame) error {
	if err := needUUID("run_id", f.RunID); err != nil {
		return err
	}
	if f.Attempt == nil {
		return Invalid("attempt", "attempt is required")
	}
	if *f.Attempt < 1 {
		return Invalid("attempt", "attempt must be 1 or more")
	}
	return nil
}

func checkAttachBytes(f *Frame) error {
	if err := needUUID("attach_id", f.AttachID); err != nil {
		return err
	}
	if len(f.Bytes) > MaxAttachChunk {
		return Invalid("bytes", "bytes must be at most %d", MaxAttachChunk)
	}
	return nil
}

// checkSession: a session name is pam-<8 lowercase hex> and, since the
// name derives from the run's id (docs/architecture.md#data-model), the name of that run.
func checkSession(runID, name string) error {
	if !sessionNameRe.MatchString(name) {
		return Invalid("session_name", "session_name %s is not pam-<8 lowercase hex>", quote(name))
	}
	if want := "pam-" + runID[:8]; name != want {
		return Invalid("session_name", "session_name %s is not %s, the session of this run", quote(name), want)
	}
	return nil
}

func checkTermSize(rows, cols int) error {
	if !ValidTermSize(rows, cols) {
		field := "rows"
		if rows >= MinTermSize && rows <= MaxTermSize {
			field = "cols"
		}
		return Invalid(field, "size %dx%d is out of bounds: rows and cols must be %d to %d", rows, cols, MinTermSize, MaxTermSize)
	}
	return nil
}

func checkSeq(seq *int64) error {
	if seq != nil && *seq < 0 {
		return Invalid("seq", "seq must not be negative")
	}
	return nil
}

func checkCode(code string) error {
	if len(code) > maxCode || !codeRe.MatchString(code) {
		return Invalid("code", "code %s is not a lowercase code of at most %d characters", quote(code), maxCode)
	}
	return nil
}

// checkText bounds a free-text field to max characters of valid UTF-8
// without NUL, which PostgreSQL cannot store.
func checkText(field, s string, max int) error {
	if len(s) > max*utf8.UTFMax || utf8.RuneCountInString(s) > max {
		return Invalid(field, "%s must be at most %d characters", field, max)
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return Invalid(field, "%s must be valid UTF-8 without NUL", field)
	}
	return nil
}

func checkTimestamp(t *time.Time) error {
	if t != nil && (t.Year() < 0 || t.Year() > 9999) {
		return Invalid("timestamp", "timestamp is out of range")
	}
	return nil
}

func needUUID(field, s string) error {
	if !ValidUUID(s) {
		return Invalid(field, "%s %s is not a lowercase UUID", field, quote(s))
	}
	return nil
}

// ValidUUID reports whether s is a UUID in canonical lowercase form, the
// form pam gives every id it makes and the only one it puts into tmux
// options, file names and frames.
func ValidUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// jsonHoldsNUL reports whether a JSON value (valid) has a string, key or
// value, holding U+0000, which PostgreSQL's jsonb refuses.
func jsonHoldsNUL(raw []byte) bool {
	if !bytes.Contains(raw, []byte(`\u0000`)) {
		return false // the only way to spell NUL in JSON
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true // not reached for valid JSON; refuse rather than guess
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return true
		}
	}
}

// quote shows a value from a frame in a message: quoted, and cut short so
// that a message about a huge field stays small.
func quote(s string) string {
	const max = 40
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}

// BoundText makes s fit a frame's free-text field: valid UTF-8, NUL
// bytes dropped, and cut to MaxText characters. Senders pass error
// messages and details through it, so that their frames pass Validate.
func BoundText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if utf8.RuneCountInString(s) <= MaxText {
		return s
	}
	n := 0
	for i := range s {
		if n == MaxText-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
