package wire

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

const (
	tRun     = "0a0a0a0a-1111-4111-8111-111111111111"
	tTask    = "7a5c0000-6666-4666-8666-666666666666"
	tAttach  = "aaaaaaaa-0000-4000-8000-000000000001"
	tRequest = "bbbbbbbb-0000-4000-8000-000000000002"
	tHost    = "0f0f0f0f-5555-4555-8555-555555555555"
)

func i64(n int64) *int64 { return &n }
func yes() *bool         { b := true; return &b }

// validFrames holds one valid frame of every type, as the peers send
// them; the fuzz target seeds from them too.
func validFrames() map[string]Frame {
	now := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	return map[string]Frame{
		FrameHeartbeatAck: HeartbeatAckFrame{Timestamp: &now},
		FrameRunDispatch: RunDispatchFrame{RunID: tRun, Attempt: IntPtr(2), TaskID: tTask, Provider: "claude",
			SessionName: "pam-0a0a0a0a", Cwd: "/srv/repo", Prompt: "fix it; rm -rf / # literal", Args: []string{"--model", "x"},
			TaskTitle: "Fix the Login Bug!", SignalToken: "pst1." + tHost + ".2.abcdef"},
		FrameRunStop:      RunStopFrame{RunID: tRun, Attempt: IntPtr(1), Force: true},
		FrameSendKeys:     SendKeysFrame{RunID: tRun, Attempt: IntPtr(1), Keys: []Key{{Text: "yes"}, {Key: "Enter"}}},
		FrameSignalAck:    SignalAckFrame{RunID: tRun, Attempt: IntPtr(1), Kind: SignalProgress, Seq: i64(4), Result: ResultOutOfOrder},
		FrameAttachOpen:   AttachOpenFrame{AttachID: tAttach, RunID: tRun, SessionName: "pam-0a0a0a0a", Rows: 24, Cols: 80},
		FrameAttachInput:  AttachInputFrame{AttachID: tAttach, Bytes: []byte("ls\r")},
		FrameAttachResize: AttachResizeFrame{AttachID: tAttach, Rows: 50, Cols: 200},
		FrameAttachClose:  AttachCloseFrame{AttachID: tAttach},
		FrameLogRequest:   LogRequestFrame{RequestID: tRequest, RunID: tRun, Offset: i64(0)},
		FrameError:        ErrorFrame{Code: CodeMalformedFrame, Message: "run_state: state \"x\" is not one of …", RunID: tRun},
		FramePaneWatch:    PaneWatchFrame{RunID: tRun, Attempt: IntPtr(1)},

		FrameHeartbeat:      HeartbeatFrame{HostID: tHost, InstanceID: "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", Timestamp: &now},
		FrameRunDispatchAck: RunDispatchAckFrame{RunID: tRun, Attempt: IntPtr(1), Accepted: yes(), Reason: ""},
		FrameSnapshot:       SnapshotFrame{RunID: tRun, Attempt: IntPtr(1), Capture: "\x1b[1mhello\x1b[0m\n$ ", Timestamp: &now},
		FrameSignal: SignalFrame{RunID: tRun, Attempt: IntPtr(1), Kind: SignalFinished, Source: SourceWrapper,
			Payload: json.RawMessage(`{"exit_code":0}`), Timestamp: &now},
		FrameLogChunk:     LogChunkFrame{RunID: tRun, RequestID: tRequest, Text: "--- log ---\n", EOF: true, Timestamp: &now},
		FrameRunState:     RunStateFrame{RunID: tRun, Attempt: IntPtr(1), State: StateSpawnFailed, Detail: "tmux: exit 1"},
		FrameAttachOutput: AttachOutputFrame{AttachID: tAttach, Bytes: []byte("\x1b[2J")},
		FrameAttachClosed: AttachClosedFrame{AttachID: tAttach, Reason: "the tmux client exited"},

		FrameWorkspaceRequest: WorkspaceRequestFrame{RequestID: tRequest, RunID: tRun, Op: WorkspaceOpDiff},
		FrameWorkspaceReply:   WorkspaceReplyFrame{RequestID: tRequest, RunID: tRun, Text: "diff --git a/x b/x\n", EOF: true},
		FrameWorkspaceReady:   WorkspaceReadyFrame{RunID: tRun, Attempt: IntPtr(1), Workspace: &tWorkspace},
		FrameWorkspaceRemoved: WorkspaceRemovedFrame{RunID: tRun, Workspace: &tWorkspace, Reason: "retention"},
		FrameWorkspacePushed:  WorkspacePushedFrame{RunID: tRun, Workspace: &tWorkspace, OK: yes(), Detail: "pushed"},

		FrameScreen: ScreenFrame{RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNeedsInput, Text: "Do you want to proceed?\n❯ 1. Yes\n2. No",
			Choices: []Choice{{Key: "1", Label: "Yes"}, {Key: "2", Label: "No, and tell Claude what to do differently (esc)"}}},
	}
}

var tWorkspace = Workspace{Path: "/var/lib/pam/worktrees/" + tRun, Branch: "pam/fix-the-login-bug-0a0a0a0a", BaseCommit: "0123456789abcdef0123456789abcdef01234567"}

func TestValidateAcceptsValidFrames(t *testing.T) {
	valid := validFrames()
	for typ := range frameDecoders {
		if _, ok := valid[typ]; !ok {
			t.Errorf("no valid %s frame in the table", typ)
		}
	}
	more := []Frame{
		HeartbeatFrame{},
		HeartbeatFrame{InstanceID: "6F1C1C9E3B7E4A539D8F2A5B8C9D0E1F"}, // any form registration takes
		RunDispatchFrame{RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "shell", SessionName: "pam-0a0a0a0a", SignalToken: "t"},
		SignalAckFrame{RunID: tRun, Attempt: IntPtr(1), Kind: "started", Code: "not_found", Message: "run not found"},
		SignalAckFrame{RunID: "../x", Kind: "exploded", Code: CodeValidationFailed, Message: "signal: kind …"},
		AttachOpenFrame{AttachID: tAttach, RunID: tRun, SessionName: "pam-0a0a0a0a"}, // default size
		AttachResizeFrame{AttachID: tAttach, Rows: MaxTermSize, Cols: MinTermSize},
		ErrorFrame{Code: "unexpected_frame", Message: strings.Repeat("é", MaxText)},
		SignalFrame{RunID: tRun, Kind: SignalStarted, Source: SourceProviderHook}, // missing_attempt is ingest's answer
		SignalFrame{RunID: tRun, Attempt: IntPtr(1), Kind: SignalProgress, Source: SourceWrapper, Payload: json.RawMessage(`{"a":"\\u0000"}`)},
		RunStateFrame{State: StateOrphanDetected, Detail: "session pam-00000000 maps to no run"},
		RunStateFrame{RunID: tRun, Attempt: IntPtr(3), State: StateWrapperDied, Detail: strings.Repeat("x", MaxText)},
		RunDispatchAckFrame{RunID: tRun, Attempt: IntPtr(1), Accepted: new(bool), Reason: strings.Repeat("ü", MaxText)},
		LogChunkFrame{RunID: tRun, RequestID: tRequest, Text: strings.Repeat("x", MaxLogChunk)},
		AttachOutputFrame{AttachID: tAttach, Bytes: make([]byte, MaxAttachChunk)},
		RunDispatchFrame{RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "shell", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			Repo: &Repo{URL: "git@github.com:o/r.git", Base: "release/1.2"}, ProjectID: tHost, Workspace: &Workspace{Branch: "pam/x-0a0a0a0a"}},
		RunDispatchFrame{RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "shell", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			Workspace: &Workspace{Branch: "pam/x-0a0a0a0a"}}, // the repo was removed: the worker fails the attempt
		WorkspaceReplyFrame{RequestID: tRequest, RunID: tRun, EOF: true, Code: CodeNoWorkspace, Message: "no worktree"},
		RunDispatchFrame{RunID: tRun, Attempt: IntPtr(2), TaskID: tTask, Provider: "claude", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			AgentSessionID: "5f0c6d3e-1d2b-4c5a-9e8f-0a1b2c3d4e5f"}, // a resume with the provider's continue_message
		RunDispatchFrame{RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "claude", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			AgentSessionID: "thread_abc", Text: "now the docs\nplease", Workspace: &tWorkspace}, // a continuation in the old run's worktree
		RunStateFrame{RunID: tRun, Attempt: IntPtr(1), State: StateWorkspaceFailed, Detail: "git fetch: exit status 128"},
		ScreenFrame{RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNone},
		ScreenFrame{RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNone, Working: true},
		ScreenFrame{RunID: tRun, Attempt: IntPtr(2), Attention: AttentionRateLimited, Text: "5-hour limit reached ∙ resets 3pm", ResetsAt: valid[FrameHeartbeat].(HeartbeatFrame).Timestamp},
		ScreenFrame{RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNeedsInput, Text: strings.Repeat("x", MaxAttentionText),
			Choices: []Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: strings.Repeat("é", MaxAttentionText/2)}}},
	}
	for typ, f := range valid {
		if err := f.Validate(); err != nil {
			t.Errorf("valid %s refused: %v", typ, err)
		}
	}
	for _, f := range more {
		if err := f.Validate(); err != nil {
			t.Errorf("valid %s refused: %v", f.Type(), err)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		typ   string
		what  string
		mod   func(Frame) Frame
		field string
	}{

		{FrameRunDispatch, "bad run id", m(func(f *RunDispatchFrame) { f.RunID = "../../etc/passwd" }), "run_id"},
		{FrameRunDispatch, "uppercase run id", m(func(f *RunDispatchFrame) { f.RunID = strings.ToUpper(tRun) }), "run_id"},
		{FrameRunDispatch, "braced run id", m(func(f *RunDispatchFrame) { f.RunID = "{" + tRun + "}" }), "run_id"},
		{FrameRunDispatch, "no attempt", m(func(f *RunDispatchFrame) { f.Attempt = nil }), "attempt"},
		{FrameRunDispatch, "attempt 0", m(func(f *RunDispatchFrame) { f.Attempt = IntPtr(0) }), "attempt"},
		{FrameRunDispatch, "negative attempt", m(func(f *RunDispatchFrame) { f.Attempt = IntPtr(-3) }), "attempt"},
		{FrameRunDispatch, "uppercase session", m(func(f *RunDispatchFrame) { f.SessionName = "pam-0A0A0A0A" }), "session_name"},
		{FrameRunDispatch, "injected session", m(func(f *RunDispatchFrame) { f.SessionName = "pam-0a0a0a0a;kill-server" }), "session_name"},
		{FrameRunDispatch, "another run's session", m(func(f *RunDispatchFrame) { f.SessionName = "pam-0b0b0b0b" }), "session_name"},
		{FrameRunDispatch, "no session", m(func(f *RunDispatchFrame) { f.SessionName = "" }), "session_name"},
		{FrameRunDispatch, "task not a UUID", m(func(f *RunDispatchFrame) { f.TaskID = "task-1" }), "task_id"},
		{FrameRunDispatch, "bad provider", m(func(f *RunDispatchFrame) { f.Provider = "../sh" }), "provider"},
		{FrameRunDispatch, "no provider", m(func(f *RunDispatchFrame) { f.Provider = "" }), "provider"},
		{FrameRunDispatch, "relative cwd", m(func(f *RunDispatchFrame) { f.Cwd = "repo" }), "cwd"},
		{FrameRunDispatch, "cwd with NUL", m(func(f *RunDispatchFrame) { f.Cwd = "/a\x00b" }), "cwd"},
		{FrameRunDispatch, "cwd too long", m(func(f *RunDispatchFrame) { f.Cwd = "/" + long(MaxPath) }), "cwd"},
		{FrameRunDispatch, "prompt too long", m(func(f *RunDispatchFrame) { f.Prompt = long(MaxPrompt + 1) }), "prompt"},
		{FrameRunDispatch, "prompt with NUL", m(func(f *RunDispatchFrame) { f.Prompt = "a\x00" }), "prompt"},
		{FrameRunDispatch, "too many args", m(func(f *RunDispatchFrame) { f.Args = make([]string, MaxArgs+1) }), "args"},
		{FrameRunDispatch, "arg too long", m(func(f *RunDispatchFrame) { f.Args = []string{long(MaxArg + 1)} }), "args"},
		{FrameRunDispatch, "arg with NUL", m(func(f *RunDispatchFrame) { f.Args = []string{"a\x00"} }), "args"},
		{FrameRunDispatch, "title too long", m(func(f *RunDispatchFrame) { f.TaskTitle = strings.Repeat("é", MaxTitle+1) }), "task_title"},
		{FrameRunDispatch, "repo without workspace", m(func(f *RunDispatchFrame) { f.Repo = &Repo{URL: "/srv/r"} }), "workspace"},
		{FrameRunDispatch, "session id as an option", m(func(f *RunDispatchFrame) { f.AgentSessionID = "--dangerously-skip-permissions" }), "agent_session_id"},
		{FrameRunDispatch, "session id with a space", m(func(f *RunDispatchFrame) { f.AgentSessionID = "a b" }), "agent_session_id"},
		{FrameRunDispatch, "session id too long", m(func(f *RunDispatchFrame) { f.AgentSessionID = long(MaxAgentSessionID + 1) }), "agent_session_id"},
		{FrameRunDispatch, "a resume message without a session", m(func(f *RunDispatchFrame) { f.Text = "go on" }), "text"},
		{FrameRunDispatch, "a resume message too long", m(func(f *RunDispatchFrame) {
			f.AgentSessionID, f.Text = "s1", strings.Repeat("é", MaxContinueText+1)
		}), "text"},
		{FrameRunDispatch, "branch as an option", m(func(f *RunDispatchFrame) {
			f.Repo, f.ProjectID, f.Workspace = &Repo{URL: "/srv/r"}, tHost, &Workspace{Branch: "--upload-pack=x"}
		}), "workspace.branch"},
		{FrameRunDispatch, "repo url as an option", m(func(f *RunDispatchFrame) {
			f.Repo, f.ProjectID, f.Workspace = &Repo{URL: "--upload-pack=touch /tmp/x"}, tHost, &Workspace{Branch: "pam/x"}
		}), "repo.url"},
		{FrameRunDispatch, "base as an option", m(func(f *RunDispatchFrame) {
			f.Repo, f.ProjectID, f.Workspace = &Repo{URL: "/srv/r", Base: "-x"}, tHost, &Workspace{Branch: "pam/x"}
		}), "repo.base"},
		{FrameWorkspaceRequest, "unknown op", m(func(f *WorkspaceRequestFrame) { f.Op = "rm" }), "op"},
		{FrameWorkspaceReady, "relative path", m(func(f *WorkspaceReadyFrame) {
			f.Workspace = &Workspace{Path: "wt", Branch: "pam/x", BaseCommit: tWorkspace.BaseCommit}
		}), "workspace.path"},
		{FrameWorkspaceReady, "short commit", m(func(f *WorkspaceReadyFrame) {
			f.Workspace = &Workspace{Path: "/wt", Branch: "pam/x", BaseCommit: "abc"}
		}), "workspace.base_commit"},
		{FrameWorkspacePushed, "no ok", m(func(f *WorkspacePushedFrame) { f.OK = nil }), "ok"},

		{FrameScreen, "no attempt", m(func(f *ScreenFrame) { f.Attempt = nil }), "attempt"},
		{FrameScreen, "an unknown attention", m(func(f *ScreenFrame) { f.Attention = "idle" }), "attention"},
		{FrameScreen, "no attention", m(func(f *ScreenFrame) { f.Attention = "" }), "attention"},
		{FrameScreen, "asking and working", m(func(f *ScreenFrame) { f.Working = true }), "working"},
		{FrameScreen, "none with a text", m(func(f *ScreenFrame) { f.Attention, f.Choices = AttentionNone, nil }), "attention"},
		{FrameScreen, "text too long", m(func(f *ScreenFrame) { f.Text = strings.Repeat("é", MaxAttentionText/2+1) }), "text"},
		{FrameScreen, "an escape in the text", m(func(f *ScreenFrame) { f.Text = "\x1b[2Jhi" }), "text"},
		{FrameScreen, "a bidi override in the text", m(func(f *ScreenFrame) { f.Text = "a\u202eb" }), "text"},
		{FrameScreen, "a C1 control in the text", m(func(f *ScreenFrame) { f.Text = "a\u009bb" }), "text"},
		{FrameScreen, "bad UTF-8", m(func(f *ScreenFrame) { f.Text = "\xff" }), "text"},
		{FrameScreen, "a newline in a label", m(func(f *ScreenFrame) { f.Choices[0].Label = "a\nb" }), "choices"},
		{FrameScreen, "an empty label", m(func(f *ScreenFrame) { f.Choices[0].Label = "" }), "choices"},
		{FrameScreen, "a key off the allowlist", m(func(f *ScreenFrame) { f.Choices[0].Key = "Enter" }), "choices"},
		{FrameScreen, "a two-digit key", m(func(f *ScreenFrame) { f.Choices[0].Key = "10" }), "choices"},
		{FrameScreen, "a key twice", m(func(f *ScreenFrame) { f.Choices[1].Key = "1" }), "choices"},
		{FrameScreen, "too many choices", m(func(f *ScreenFrame) { f.Choices = slices.Repeat(f.Choices, 7) }), "choices"},
		{FrameRunDispatch, "no signal token", m(func(f *RunDispatchFrame) { f.SignalToken = "" }), "signal_token"},
		{FrameRunDispatch, "signal token with a line break", m(func(f *RunDispatchFrame) { f.SignalToken = "a\r\nX-Evil: 1" }), "signal_token"},
		{FrameRunDispatch, "signal token too long", m(func(f *RunDispatchFrame) { f.SignalToken = long(MaxToken + 1) }), "signal_token"},
		{FrameHeartbeat, "timestamp out of range", m(func(f *HeartbeatFrame) { ts := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC); f.Timestamp = &ts }), "timestamp"},

		{FrameRunStop, "bad run id", m(func(f *RunStopFrame) { f.RunID = "x" }), "run_id"},
		{FrameRunStop, "no attempt", m(func(f *RunStopFrame) { f.Attempt = nil }), "attempt"},

		{FrameSendKeys, "no keys", m(func(f *SendKeysFrame) { f.Keys = nil }), "keys"},
		{FrameSendKeys, "key not allowed", m(func(f *SendKeysFrame) { f.Keys = []Key{{Key: "C-b"}} }), "keys[0]"},
		{FrameSendKeys, "text with ;", m(func(f *SendKeysFrame) { f.Keys = []Key{{Text: "a; kill-server"}} }), "keys[0]"},
		{FrameSendKeys, "no attempt", m(func(f *SendKeysFrame) { f.Attempt = nil }), "attempt"},

		{FrameSignalAck, "unknown result", m(func(f *SignalAckFrame) { f.Result = "maybe" }), "result"},
		{FrameSignalAck, "no result nor code", m(func(f *SignalAckFrame) { f.Result = "" }), "result"},
		{FrameSignalAck, "unknown kind", m(func(f *SignalAckFrame) { f.Kind = "exploded" }), "kind"},
		{FrameSignalAck, "negative seq", m(func(f *SignalAckFrame) { f.Seq = i64(-1) }), "seq"},
		{FrameSignalAck, "bad code", m(func(f *SignalAckFrame) { f.Code = "Not Found" }), "code"},
		{FrameSignalAck, "error message too long", m(func(f *SignalAckFrame) { f.Code = "x"; f.Message = long(MaxText + 1) }), "message"},
		{FrameSignalAck, "error echoing a huge kind", m(func(f *SignalAckFrame) { f.Code = "x"; f.Kind = long(65) }), "kind"},

		{FrameAttachOpen, "bad attach id", m(func(f *AttachOpenFrame) { f.AttachID = "a1" }), "attach_id"},
		{FrameAttachOpen, "bad run id", m(func(f *AttachOpenFrame) { f.RunID = "../etc" }), "run_id"},
		{FrameAttachOpen, "session of another run", m(func(f *AttachOpenFrame) { f.SessionName = "pam-0b0b0b0b" }), "session_name"},
		{FrameAttachOpen, "rows only", m(func(f *AttachOpenFrame) { f.Cols = 0 }), "cols"},
		{FrameAttachOpen, "too wide", m(func(f *AttachOpenFrame) { f.Cols = MaxTermSize + 1 }), "cols"},
		{FrameAttachOpen, "negative rows", m(func(f *AttachOpenFrame) { f.Rows = -1 }), "rows"},

		{FrameAttachInput, "bad attach id", m(func(f *AttachInputFrame) { f.AttachID = "" }), "attach_id"},
		{FrameAttachInput, "too many bytes", m(func(f *AttachInputFrame) { f.Bytes = make([]byte, MaxAttachChunk+1) }), "bytes"},
		{FrameAttachResize, "zero size", m(func(f *AttachResizeFrame) { f.Rows, f.Cols = 0, 0 }), "rows"},
		{FrameAttachResize, "too tall", m(func(f *AttachResizeFrame) { f.Rows = MaxTermSize + 1 }), "rows"},
		{FrameAttachClose, "bad attach id", m(func(f *AttachCloseFrame) { f.AttachID = strings.ToUpper(tAttach) }), "attach_id"},

		{FrameLogRequest, "bad request id", m(func(f *LogRequestFrame) { f.RequestID = "q" }), "request_id"},
		{FrameLogRequest, "bad run id", m(func(f *LogRequestFrame) { f.RunID = "nope" }), "run_id"},
		{FrameLogRequest, "negative offset", m(func(f *LogRequestFrame) { f.Offset = i64(-1) }), "offset"},

		{FrameError, "no code", m(func(f *ErrorFrame) { f.Code = "" }), "code"},
		{FrameError, "code too long", m(func(f *ErrorFrame) { f.Code = long(maxCode + 1) }), "code"},
		{FrameError, "message too long", m(func(f *ErrorFrame) { f.Message = strings.Repeat("é", MaxText+1) }), "message"},
		{FrameError, "message not UTF-8", m(func(f *ErrorFrame) { f.Message = "\xff" }), "message"},
		{FrameError, "bad run id", m(func(f *ErrorFrame) { f.RunID = "x" }), "run_id"},

		{FrameHeartbeat, "bad host id", m(func(f *HeartbeatFrame) { f.HostID = "host-1" }), "host_id"},
		{FrameHeartbeat, "bad instance id", m(func(f *HeartbeatFrame) { f.InstanceID = "me" }), "instance_id"},

		{FrameRunDispatchAck, "no accepted", m(func(f *RunDispatchAckFrame) { f.Accepted = nil }), "accepted"},
		{FrameRunDispatchAck, "no attempt", m(func(f *RunDispatchAckFrame) { f.Attempt = nil }), "attempt"},
		{FrameRunDispatchAck, "bad run id", m(func(f *RunDispatchAckFrame) { f.RunID = "../../etc/passwd" }), "run_id"},
		{FrameRunDispatchAck, "reason too long", m(func(f *RunDispatchAckFrame) { f.Reason = long(MaxText + 1) }), "reason"},
		{FrameRunDispatchAck, "reason with NUL", m(func(f *RunDispatchAckFrame) { f.Reason = "no\x00" }), "reason"},

		{FrameSnapshot, "no attempt", m(func(f *SnapshotFrame) { f.Attempt = nil }), "attempt"},
		{FrameSnapshot, "capture too large", m(func(f *SnapshotFrame) { f.Capture = long(MaxCapture + 1) }), "capture"},

		{FrameSignal, "bad run id", m(func(f *SignalFrame) { f.RunID = "" }), "run_id"},
		{FrameSignal, "attempt 0", m(func(f *SignalFrame) { f.Attempt = IntPtr(0) }), "attempt"},
		{FrameSignal, "unknown kind", m(func(f *SignalFrame) { f.Kind = "exploded" }), "kind"},
		{FrameSignal, "manual source", m(func(f *SignalFrame) { f.Source = SourceManual }), "source"},
		{FrameSignal, "no source", m(func(f *SignalFrame) { f.Source = "" }), "source"},
		{FrameSignal, "negative seq", m(func(f *SignalFrame) { f.Seq = i64(-5) }), "seq"},
		{FrameSignal, "payload not JSON", m(func(f *SignalFrame) { f.Payload = json.RawMessage(`{"exit_code":`) }), "payload"},
		{FrameSignal, "payload too large", m(func(f *SignalFrame) { f.Payload = json.RawMessage(`"` + long(MaxPayload) + `"`) }), "payload"},
		{FrameSignal, "payload with NUL", m(func(f *SignalFrame) { f.Payload = json.RawMessage(`{"exit_code":0,"x":["\u0000"]}`) }), "payload"},
		{FrameSignal, "payload key with NUL", m(func(f *SignalFrame) { f.Payload = json.RawMessage(`{"\u0000":1}`) }), "payload"},

		{FrameLogChunk, "bad request id", m(func(f *LogChunkFrame) { f.RequestID = "all" }), "request_id"},
		{FrameLogChunk, "no run id", m(func(f *LogChunkFrame) { f.RunID = "" }), "run_id"},
		{FrameLogChunk, "text too long", m(func(f *LogChunkFrame) { f.Text = long(MaxLogChunk + 1) }), "text"},

		{FrameRunState, "unknown state", m(func(f *RunStateFrame) { f.State = "exploded" }), "state"},
		{FrameRunState, "no run id", m(func(f *RunStateFrame) { f.RunID = "" }), "run_id"},
		{FrameRunState, "no attempt", m(func(f *RunStateFrame) { f.Attempt = nil }), "attempt"},
		{FrameRunState, "orphan with an attempt but no run", m(func(f *RunStateFrame) { f.State, f.RunID = StateOrphanDetected, "" }), "attempt"},
		{FrameRunState, "detail too long", m(func(f *RunStateFrame) { f.Detail = strings.Repeat("€", MaxText+1) }), "detail"},
		{FrameRunState, "detail with NUL", m(func(f *RunStateFrame) { f.Detail = "\x00" }), "detail"},

		{FrameAttachOutput, "bad attach id", m(func(f *AttachOutputFrame) { f.AttachID = "a1" }), "attach_id"},
		{FrameAttachOutput, "too many bytes", m(func(f *AttachOutputFrame) { f.Bytes = make([]byte, MaxAttachChunk+1) }), "bytes"},
		{FrameAttachClosed, "bad attach id", m(func(f *AttachClosedFrame) { f.AttachID = "" }), "attach_id"},
		{FrameAttachClosed, "reason too long", m(func(f *AttachClosedFrame) { f.Reason = long(5000) }), "reason"},
	}
	valid := validFrames()
	for _, c := range cases {
		f := c.mod(valid[c.typ])
		err := f.Validate()
		if err == nil {
			t.Errorf("%s %s: accepted", c.typ, c.what)
			continue
		}
		e, ok := AsError(err)
		if !ok {
			t.Errorf("%s %s: %v is not a wire error", c.typ, c.what, err)
			continue
		}
		field, _ := e.Details["field"].(string)
		if c.typ == FrameSendKeys && e.Code == CodeKeyNotAllowed {
			field = e.Message
		}
		if !strings.Contains(field, c.field) {
			t.Errorf("%s %s: %v names field %q, want %q", c.typ, c.what, err, field, c.field)
		}
		if !strings.HasPrefix(e.Message, f.Type()+": ") {
			t.Errorf("%s %s: message %q does not start with the frame type", c.typ, c.what, e.Message)
		}
		if len(e.Message) > 300 {
			t.Errorf("%s %s: message of %d bytes", c.typ, c.what, len(e.Message))
		}
	}
}

// m makes a case's change to a valid frame of type F.
func m[F Frame](change func(*F)) func(Frame) Frame {
	return func(f Frame) Frame {
		v := f.(F)
		change(&v)
		return v
	}
}

func TestBoundText(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("é", MaxText), strings.Repeat("é", MaxText+1), strings.Repeat("x", 5000) + "\x00\xff", "a\x00b\xffc"} {
		out := BoundText(s)
		f := ErrorFrame{Code: "x", Message: out}
		if err := f.Validate(); err != nil {
			t.Errorf("BoundText(%d bytes) = %d bytes, refused: %v", len(s), len(out), err)
		}
		if len(s) < 100 && !strings.ContainsRune(s, 0) && utf8.ValidString(s) && out != s {
			t.Errorf("BoundText(%q) = %q, want it unchanged", s, out)
		}
	}
}

// A signal's payload may carry the CLI's session id: read when it is a
// valid one, an error naming payload.agent_session_id when it is not,
// nothing when the payload has none.
func TestAgentSessionOf(t *testing.T) {
	for _, tc := range []struct {
		payload string
		want    string
		bad     bool
	}{
		{``, "", false},
		{`{"exit_code":0}`, "", false},
		{`[1,2]`, "", false},
		{`"x"`, "", false},
		{`{"agent_session_id":"5f0c6d3e-1d2b-4c5a-9e8f-0a1b2c3d4e5f"}`, "5f0c6d3e-1d2b-4c5a-9e8f-0a1b2c3d4e5f", false},
		{`{"reason":"provider_failed","agent_session_id":"abc"}`, "abc", false},
		{`{"agent_session_id":"` + strings.Repeat("a", MaxAgentSessionID) + `"}`, strings.Repeat("a", MaxAgentSessionID), false},
		{`{"agent_session_id":"` + strings.Repeat("a", MaxAgentSessionID+1) + `"}`, "", true},
		{`{"agent_session_id":""}`, "", true},
		{`{"agent_session_id":"a b"}`, "", true},
		{`{"agent_session_id":"-r"}`, "", true},
		{`{"agent_session_id":"a\nb"}`, "", true},
		{`{"agent_session_id":"é"}`, "", true},
		{`{"agent_session_id":42}`, "", true},
		{`{"agent_session_id":null}`, "", true},
	} {
		got, err := AgentSessionOf(json.RawMessage(tc.payload))
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("AgentSessionOf(%s) = %q, %v; want %q, bad %v", tc.payload, got, err, tc.want, tc.bad)
		}
		if e, ok := AsError(err); err != nil && (!ok || e.Code != CodeValidationFailed || e.Details["field"] != "payload.agent_session_id") {
			t.Errorf("AgentSessionOf(%s) error %v does not name payload.agent_session_id", tc.payload, err)
		}
	}
}

// TestDecodeFrameStrict: a frame is decoded into its type's struct with
// any other field refused. A field of another frame type comes back as
// the frame with an error naming the field, answered as a Validate
// refusal is (a signal by its signal_ack); input that is not one frame of
// a known type, a field no frame type has, or a value of the wrong JSON
// type is no frame at all (malformed_frame).
func TestDecodeFrameStrict(t *testing.T) {
	for typ, f := range validFrames() {
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), `{"type":"`+typ+`"`) {
			t.Errorf("%s encodes as %.60s…: the type does not come first", typ, b)
		}
		back, err := DecodeFrame(b)
		if err != nil || back.Type() != typ || !reflect.DeepEqual(back, f) {
			t.Errorf("%s: %s decodes to %+v, %v", typ, b, back, err)
		}
		for _, extra := range []string{`"capture":"x"`, `"detail":""`, `"force":true`, `"rows":1`, `"host_id":"h"`} {
			name := strings.Trim(strings.Split(extra, ":")[0], `"`)
			if strings.Contains(string(b), `"`+name+`":`) {
				continue // one of its own
			}
			bad := append(b[:len(b)-1:len(b)-1], `,`+extra+`}`...)
			got, err := DecodeFrame(bad)
			e, ok := AsError(err)
			if !ok || got == nil || got.Type() != typ || e.Details["field"] != name || !strings.HasPrefix(e.Message, typ+": ") {
				t.Errorf("%s with %s: decoded %+v, %v; want the frame and an error naming %s", typ, extra, got, err, name)
			}
		}
		for _, extra := range []string{`"bogus":1`, `"":1`, `"capture":1`, `"capture":"x","attempt":"x"`} {
			bad := append(b[:len(b)-1:len(b)-1], `,`+extra+`}`...)
			if got, err := DecodeFrame(bad); got != nil || err == nil {
				t.Errorf("%s with %s: decoded %+v, %v; want no frame", typ, extra, got, err)
			}
		}
	}
	for _, s := range []string{``, `null`, `[]`, `{}`, `{"type":""}`, `{"type":null}`, `{"type":"no_such_frame"}`, `{"type":1}`,
		`{"type":"heartbeat"} {}`, `{"type":"heartbeat"`, strings.Repeat(" ", MaxFrame+1),
		`{"type":"run_stop","run_id":"` + tRun + `","attempt":"1","force":false}`} {
		if f, err := DecodeFrame([]byte(s)); f != nil || err == nil {
			t.Errorf("%.60q decoded to %+v, %v", s, f, err)
		}
	}
}
