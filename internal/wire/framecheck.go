// The checks of every uplink frame: each frame type's Validate, in the
// order of frames.go. The bounds and helpers they share are in
// framebounds.go.

package wire

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
)

// Each frame type's Validate checks everything about it that needs no
// state: ids are UUIDs, attempts are 1 or more, enums hold known values,
// session names are pam-<8 hex> and the run's own, sizes and free text
// are bounded. What it accepts can be handed to tmux, a file or the
// database without another look; what it refuses is answered and dropped
// (docs/architecture.md#uplink-frames). The error is a *Error naming the
// field (validation_failed, or key_not_allowed for send_keys), its
// message starting with the frame type. The fields a frame may carry are
// its struct's: DecodeFrame refuses any other.

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

func (f HeartbeatAckFrame) check() error { return checkTimestamp(f.Timestamp) }

func (f RunDispatchFrame) check() error {
	if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
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
func checkDispatchResume(f RunDispatchFrame) error {
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

func (f RunStopFrame) check() error { return checkRunAttempt(f.RunID, f.Attempt) }

func (f SendKeysFrame) check() error {
	if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
		return err
	}
	return ValidateKeys(f.Keys)
}

// checkSignalAck: an answer with a result echoes a valid signal; an error
// answer (code set) echoes whatever was refused, bounded.
func (f SignalAckFrame) check() error {
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
	if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
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

func (f AttachOpenFrame) check() error {
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

func (f PaneWatchFrame) check() error { return checkRunAttempt(f.RunID, f.Attempt) }

func (f AttachInputFrame) check() error { return checkAttachBytes(f.AttachID, f.Bytes) }

func (f AttachResizeFrame) check() error {
	if err := needUUID("attach_id", f.AttachID); err != nil {
		return err
	}
	return checkTermSize(f.Rows, f.Cols)
}

func (f AttachCloseFrame) check() error { return needUUID("attach_id", f.AttachID) }

func (f LogRequestFrame) check() error {
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
func (f ErrorFrame) check() error {
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
func (f HeartbeatFrame) check() error {
	if err := checkTimestamp(f.Timestamp); err != nil {
		return err
	}
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

func (f RunDispatchAckFrame) check() error {
	if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
		return err
	}
	if f.Accepted == nil {
		return Invalid("accepted", "accepted is required")
	}
	return checkText("reason", f.Reason, MaxText)
}

func (f SnapshotFrame) check() error {
	if err := checkTimestamp(f.Timestamp); err != nil {
		return err
	}
	if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
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
func (f SignalFrame) check() error {
	if err := checkTimestamp(f.Timestamp); err != nil {
		return err
	}
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

func (f LogChunkFrame) check() error {
	if err := checkTimestamp(f.Timestamp); err != nil {
		return err
	}
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
func (f RunStateFrame) check() error {
	switch f.State {
	case StateSessionLost, StateSpawnFailed, StateTmuxCrash, StateStaleSession, StateOrphanDetected, StateWrapperDied, StateIdle, StateWorkspaceFailed:
	default:
		return Invalid("state", "state %s is not one of session_lost, spawn_failed, tmux_crash, stale_session, orphan_detected, wrapper_died, idle, workspace_failed", quote(f.State))
	}
	if f.State == StateOrphanDetected && f.RunID == "" {
		if f.Attempt != nil {
			return Invalid("attempt", "an orphan without a run has no attempt")
		}
	} else if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
		return err
	}
	return checkText("detail", f.Detail, MaxText)
}

// checkScreen: a reading asks (needs_input, rate_limited) or it does not
// (none, perhaps working); what it asks is plain text within the bounds
// of attention_detail, so that it can be stored and shown as it is.
func (f ScreenFrame) check() error {
	if err := checkRunAttempt(f.RunID, f.Attempt); err != nil {
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

func (f AttachOutputFrame) check() error { return checkAttachBytes(f.AttachID, f.Bytes) }

func (f AttachClosedFrame) check() error {
	if err := needUUID("attach_id", f.AttachID); err != nil {
		return err
	}
	return checkText("reason", f.Reason, MaxText)
}
