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
		FrameHeartbeatAck: {Type: FrameHeartbeatAck, Timestamp: &now},
		FrameRunDispatch: {Type: FrameRunDispatch, RunID: tRun, Attempt: IntPtr(2), TaskID: tTask, Provider: "claude",
			SessionName: "pam-0a0a0a0a", Cwd: "/srv/repo", Prompt: "fix it; rm -rf / # literal", Args: []string{"--model", "x"},
			TaskTitle: "Fix the Login Bug!", SignalToken: "pst1." + tHost + ".2.abcdef"},
		FrameRunStop:      {Type: FrameRunStop, RunID: tRun, Attempt: IntPtr(1), Force: true},
		FrameSendKeys:     {Type: FrameSendKeys, RunID: tRun, Attempt: IntPtr(1), Keys: []Key{{Text: "yes"}, {Key: "Enter"}}},
		FrameSignalAck:    {Type: FrameSignalAck, RunID: tRun, Attempt: IntPtr(1), Kind: SignalProgress, Seq: i64(4), Result: ResultOutOfOrder},
		FrameAttachOpen:   {Type: FrameAttachOpen, AttachID: tAttach, RunID: tRun, SessionName: "pam-0a0a0a0a", Rows: 24, Cols: 80},
		FrameAttachInput:  {Type: FrameAttachInput, AttachID: tAttach, Bytes: []byte("ls\r")},
		FrameAttachResize: {Type: FrameAttachResize, AttachID: tAttach, Rows: 50, Cols: 200},
		FrameAttachClose:  {Type: FrameAttachClose, AttachID: tAttach},
		FrameLogRequest:   {Type: FrameLogRequest, RequestID: tRequest, RunID: tRun, Offset: i64(0)},
		FrameError:        {Type: FrameError, Code: CodeMalformedFrame, Message: "run_state: state \"x\" is not one of …", RunID: tRun},
		FramePaneWatch:    {Type: FramePaneWatch, RunID: tRun, Attempt: IntPtr(1)},

		FrameHeartbeat:      {Type: FrameHeartbeat, HostID: tHost, InstanceID: "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", Timestamp: &now},
		FrameRunDispatchAck: {Type: FrameRunDispatchAck, RunID: tRun, Attempt: IntPtr(1), Accepted: yes(), Reason: ""},
		FrameSnapshot:       {Type: FrameSnapshot, RunID: tRun, Attempt: IntPtr(1), Capture: "\x1b[1mhello\x1b[0m\n$ ", Timestamp: &now},
		FrameSignal: {Type: FrameSignal, RunID: tRun, Attempt: IntPtr(1), Kind: SignalFinished, Source: SourceWrapper,
			Payload: json.RawMessage(`{"exit_code":0}`), Timestamp: &now},
		FrameLogChunk:     {Type: FrameLogChunk, RunID: tRun, RequestID: tRequest, Text: "--- log ---\n", EOF: true, Timestamp: &now},
		FrameRunState:     {Type: FrameRunState, RunID: tRun, Attempt: IntPtr(1), State: StateSpawnFailed, Detail: "tmux: exit 1"},
		FrameAttachOutput: {Type: FrameAttachOutput, AttachID: tAttach, Bytes: []byte("\x1b[2J")},
		FrameAttachClosed: {Type: FrameAttachClosed, AttachID: tAttach, Reason: "the tmux client exited"},

		FrameWorkspaceRequest: {Type: FrameWorkspaceRequest, RequestID: tRequest, RunID: tRun, Op: WorkspaceOpDiff},
		FrameWorkspaceReply:   {Type: FrameWorkspaceReply, RequestID: tRequest, RunID: tRun, Text: "diff --git a/x b/x\n", EOF: true},
		FrameWorkspaceReady:   {Type: FrameWorkspaceReady, RunID: tRun, Attempt: IntPtr(1), Workspace: &tWorkspace},
		FrameWorkspaceRemoved: {Type: FrameWorkspaceRemoved, RunID: tRun, Workspace: &tWorkspace, Reason: "retention"},
		FrameWorkspacePushed:  {Type: FrameWorkspacePushed, RunID: tRun, Workspace: &tWorkspace, OK: yes(), Detail: "pushed"},

		FrameScreen: {Type: FrameScreen, RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNeedsInput, Text: "Do you want to proceed?\n❯ 1. Yes\n2. No",
			Choices: []Choice{{Key: "1", Label: "Yes"}, {Key: "2", Label: "No, and tell Claude what to do differently (esc)"}}},
	}
}

var tWorkspace = Workspace{Path: "/var/lib/pam/worktrees/" + tRun, Branch: "pam/fix-the-login-bug-0a0a0a0a", BaseCommit: "0123456789abcdef0123456789abcdef01234567"}

func TestValidateAcceptsValidFrames(t *testing.T) {
	valid := validFrames()
	for typ := range frameChecks {
		if _, ok := valid[typ]; !ok {
			t.Errorf("no valid %s frame in the table", typ)
		}
	}
	more := []Frame{
		{Type: FrameHeartbeat},
		{Type: FrameHeartbeat, InstanceID: "6F1C1C9E3B7E4A539D8F2A5B8C9D0E1F"}, // any form registration takes
		{Type: FrameRunDispatch, RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "shell", SessionName: "pam-0a0a0a0a", SignalToken: "t"},
		{Type: FrameSignalAck, RunID: tRun, Attempt: IntPtr(1), Kind: "started", Code: "not_found", Message: "run not found"},
		{Type: FrameSignalAck, RunID: "../x", Kind: "exploded", Code: CodeValidationFailed, Message: "signal: kind …"},
		{Type: FrameAttachOpen, AttachID: tAttach, RunID: tRun, SessionName: "pam-0a0a0a0a"}, // default size
		{Type: FrameAttachResize, AttachID: tAttach, Rows: MaxTermSize, Cols: MinTermSize},
		{Type: FrameError, Code: "unexpected_frame", Message: strings.Repeat("é", MaxText)},
		{Type: FrameSignal, RunID: tRun, Kind: SignalStarted, Source: SourceProviderHook}, // missing_attempt is ingest's answer
		{Type: FrameSignal, RunID: tRun, Attempt: IntPtr(1), Kind: SignalProgress, Source: SourceWrapper, Payload: json.RawMessage(`{"a":"\\u0000"}`)},
		{Type: FrameRunState, State: StateOrphanDetected, Detail: "session pam-00000000 maps to no run"},
		{Type: FrameRunState, RunID: tRun, Attempt: IntPtr(3), State: StateWrapperDied, Detail: strings.Repeat("x", MaxText)},
		{Type: FrameRunDispatchAck, RunID: tRun, Attempt: IntPtr(1), Accepted: new(bool), Reason: strings.Repeat("ü", MaxText)},
		{Type: FrameLogChunk, RunID: tRun, RequestID: tRequest, Text: strings.Repeat("x", MaxLogChunk)},
		{Type: FrameAttachOutput, AttachID: tAttach, Bytes: make([]byte, MaxAttachChunk)},
		{Type: FrameRunDispatch, RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "shell", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			Repo: &Repo{URL: "git@github.com:o/r.git", Base: "release/1.2"}, ProjectID: tHost, Workspace: &Workspace{Branch: "pam/x-0a0a0a0a"}},
		{Type: FrameRunDispatch, RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "shell", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			Workspace: &Workspace{Branch: "pam/x-0a0a0a0a"}}, // the repo was removed: the worker fails the attempt
		{Type: FrameWorkspaceReply, RequestID: tRequest, RunID: tRun, EOF: true, Code: CodeNoWorkspace, Message: "no worktree"},
		{Type: FrameRunDispatch, RunID: tRun, Attempt: IntPtr(2), TaskID: tTask, Provider: "claude", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			AgentSessionID: "5f0c6d3e-1d2b-4c5a-9e8f-0a1b2c3d4e5f"}, // a resume with the provider's continue_message
		{Type: FrameRunDispatch, RunID: tRun, Attempt: IntPtr(1), TaskID: tTask, Provider: "claude", SessionName: "pam-0a0a0a0a", SignalToken: "t",
			AgentSessionID: "thread_abc", Text: "now the docs\nplease", Workspace: &tWorkspace}, // a continuation in the old run's worktree
		{Type: FrameRunState, RunID: tRun, Attempt: IntPtr(1), State: StateWorkspaceFailed, Detail: "git fetch: exit status 128"},
		{Type: FrameScreen, RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNone},
		{Type: FrameScreen, RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNone, Working: true},
		{Type: FrameScreen, RunID: tRun, Attempt: IntPtr(2), Attention: AttentionRateLimited, Text: "5-hour limit reached ∙ resets 3pm", ResetsAt: valid[FrameHeartbeat].Timestamp},
		{Type: FrameScreen, RunID: tRun, Attempt: IntPtr(1), Attention: AttentionNeedsInput, Text: strings.Repeat("x", MaxAttentionText),
			Choices: []Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: strings.Repeat("é", MaxAttentionText/2)}}},
	}
	for typ, f := range valid {
		if err := f.Validate(); err != nil {
			t.Errorf("valid %s refused: %v", typ, err)
		}
	}
	for _, f := range more {
		if err := f.Validate(); err != nil {
			t.Errorf("valid %s refused: %v", f.Type, err)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		typ   string
		what  string
		mod   func(*Frame)
		field string
	}{
		{"", "unknown type", func(f *Frame) { f.Type = "no_such_frame" }, "type"},
		{FrameHeartbeat, "a field of another frame", func(f *Frame) { f.Detail = "x" }, "detail"},
		{FrameRunState, "a capture", func(f *Frame) { f.Capture = "x" }, "capture"},
		{FrameError, "a force flag", func(f *Frame) { f.Force = true }, "force"},
		{FrameAttachInput, "rows", func(f *Frame) { f.Rows = 3 }, "rows"},

		{FrameRunDispatch, "bad run id", func(f *Frame) { f.RunID = "../../etc/passwd" }, "run_id"},
		{FrameRunDispatch, "uppercase run id", func(f *Frame) { f.RunID = strings.ToUpper(tRun) }, "run_id"},
		{FrameRunDispatch, "braced run id", func(f *Frame) { f.RunID = "{" + tRun + "}" }, "run_id"},
		{FrameRunDispatch, "no attempt", func(f *Frame) { f.Attempt = nil }, "attempt"},
		{FrameRunDispatch, "attempt 0", func(f *Frame) { f.Attempt = IntPtr(0) }, "attempt"},
		{FrameRunDispatch, "negative attempt", func(f *Frame) { f.Attempt = IntPtr(-3) }, "attempt"},
		{FrameRunDispatch, "uppercase session", func(f *Frame) { f.SessionName = "pam-0A0A0A0A" }, "session_name"},
		{FrameRunDispatch, "injected session", func(f *Frame) { f.SessionName = "pam-0a0a0a0a;kill-server" }, "session_name"},
		{FrameRunDispatch, "another run's session", func(f *Frame) { f.SessionName = "pam-0b0b0b0b" }, "session_name"},
		{FrameRunDispatch, "no session", func(f *Frame) { f.SessionName = "" }, "session_name"},
		{FrameRunDispatch, "task not a UUID", func(f *Frame) { f.TaskID = "task-1" }, "task_id"},
		{FrameRunDispatch, "bad provider", func(f *Frame) { f.Provider = "../sh" }, "provider"},
		{FrameRunDispatch, "no provider", func(f *Frame) { f.Provider = "" }, "provider"},
		{FrameRunDispatch, "relative cwd", func(f *Frame) { f.Cwd = "repo" }, "cwd"},
		{FrameRunDispatch, "cwd with NUL", func(f *Frame) { f.Cwd = "/a\x00b" }, "cwd"},
		{FrameRunDispatch, "cwd too long", func(f *Frame) { f.Cwd = "/" + long(MaxPath) }, "cwd"},
		{FrameRunDispatch, "prompt too long", func(f *Frame) { f.Prompt = long(MaxPrompt + 1) }, "prompt"},
		{FrameRunDispatch, "prompt with NUL", func(f *Frame) { f.Prompt = "a\x00" }, "prompt"},
		{FrameRunDispatch, "too many args", func(f *Frame) { f.Args = make([]string, MaxArgs+1) }, "args"},
		{FrameRunDispatch, "arg too long", func(f *Frame) { f.Args = []string{long(MaxArg + 1)} }, "args"},
		{FrameRunDispatch, "arg with NUL", func(f *Frame) { f.Args = []string{"a\x00"} }, "args"},
		{FrameRunDispatch, "title too long", func(f *Frame) { f.TaskTitle = strings.Repeat("é", MaxTitle+1) }, "task_title"},
		{FrameRunDispatch, "repo without workspace", func(f *Frame) { f.Repo = &Repo{URL: "/srv/r"} }, "workspace"},
		{FrameRunDispatch, "session id as an option", func(f *Frame) { f.AgentSessionID = "--dangerously-skip-permissions" }, "agent_session_id"},
		{FrameRunDispatch, "session id with a space", func(f *Frame) { f.AgentSessionID = "a b" }, "agent_session_id"},
		{FrameRunDispatch, "session id too long", func(f *Frame) { f.AgentSessionID = long(MaxAgentSessionID + 1) }, "agent_session_id"},
		{FrameRunDispatch, "a resume message without a session", func(f *Frame) { f.Text = "go on" }, "text"},
		{FrameRunDispatch, "a resume message too long", func(f *Frame) {
			f.AgentSessionID, f.Text = "s1", strings.Repeat("é", MaxContinueText+1)
		}, "text"},
		{FrameRunDispatch, "branch as an option", func(f *Frame) {
			f.Repo, f.ProjectID, f.Workspace = &Repo{URL: "/srv/r"}, tHost, &Workspace{Branch: "--upload-pack=x"}
		}, "workspace.branch"},
		{FrameRunDispatch, "repo url as an option", func(f *Frame) {
			f.Repo, f.ProjectID, f.Workspace = &Repo{URL: "--upload-pack=touch /tmp/x"}, tHost, &Workspace{Branch: "pam/x"}
		}, "repo.url"},
		{FrameRunDispatch, "base as an option", func(f *Frame) {
			f.Repo, f.ProjectID, f.Workspace = &Repo{URL: "/srv/r", Base: "-x"}, tHost, &Workspace{Branch: "pam/x"}
		}, "repo.base"},
		{FrameWorkspaceRequest, "unknown op", func(f *Frame) { f.Op = "rm" }, "op"},
		{FrameWorkspaceReady, "relative path", func(f *Frame) {
			f.Workspace = &Workspace{Path: "wt", Branch: "pam/x", BaseCommit: tWorkspace.BaseCommit}
		}, "workspace.path"},
		{FrameWorkspaceReady, "short commit", func(f *Frame) { f.Workspace = &Workspace{Path: "/wt", Branch: "pam/x", BaseCommit: "abc"} }, "workspace.base_commit"},
		{FrameWorkspacePushed, "no ok", func(f *Frame) { f.OK = nil }, "ok"},

		{FrameScreen, "no attempt", func(f *Frame) { f.Attempt = nil }, "attempt"},
		{FrameScreen, "an unknown attention", func(f *Frame) { f.Attention = "idle" }, "attention"},
		{FrameScreen, "no attention", func(f *Frame) { f.Attention = "" }, "attention"},
		{FrameScreen, "asking and working", func(f *Frame) { f.Working = true }, "working"},
		{FrameScreen, "none with a text", func(f *Frame) { f.Attention, f.Choices = AttentionNone, nil }, "attention"},
		{FrameScreen, "text too long", func(f *Frame) { f.Text = strings.Repeat("é", MaxAttentionText/2+1) }, "text"},
		{FrameScreen, "an escape in the text", func(f *Frame) { f.Text = "\x1b[2Jhi" }, "text"},
		{FrameScreen, "a bidi override in the text", func(f *Frame) { f.Text = "a\u202eb" }, "text"},
		{FrameScreen, "a C1 control in the text", func(f *Frame) { f.Text = "a\u009bb" }, "text"},
		{FrameScreen, "bad UTF-8", func(f *Frame) { f.Text = "\xff" }, "text"},
		{FrameScreen, "a newline in a label", func(f *Frame) { f.Choices[0].Label = "a\nb" }, "choices"},
		{FrameScreen, "an empty label", func(f *Frame) { f.Choices[0].Label = "" }, "choices"},
		{FrameScreen, "a key off the allowlist", func(f *Frame) { f.Choices[0].Key = "Enter" }, "choices"},
		{FrameScreen, "a two-digit key", func(f *Frame) { f.Choices[0].Key = "10" }, "choices"},
		{FrameScreen, "a key twice", func(f *Frame) { f.Choices[1].Key = "1" }, "choices"},
		{FrameScreen, "too many choices", func(f *Frame) { f.Choices = slices.Repeat(f.Choices, 7) }, "choices"},
		{FrameScreen, "a capture", func(f *Frame) { f.Capture = "x" }, "capture"},
		{FrameRunDispatch, "no signal token", func(f *Frame) { f.SignalToken = "" }, "signal_token"},
		{FrameRunDispatch, "signal token with a line break", func(f *Frame) { f.SignalToken = "a\r\nX-Evil: 1" }, "signal_token"},
		{FrameRunDispatch, "signal token too long", func(f *Frame) { f.SignalToken = long(MaxToken + 1) }, "signal_token"},
		{FrameRunDispatch, "timestamp out of range", func(f *Frame) { ts := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC); f.Timestamp = &ts }, "timestamp"},

		{FrameRunStop, "bad run id", func(f *Frame) { f.RunID = "x" }, "run_id"},
		{FrameRunStop, "no attempt", func(f *Frame) { f.Attempt = nil }, "attempt"},

		{FrameSendKeys, "no keys", func(f *Frame) { f.Keys = nil }, "keys"},
		{FrameSendKeys, "key not allowed", func(f *Frame) { f.Keys = []Key{{Key: "C-b"}} }, "keys[0]"},
		{FrameSendKeys, "text with ;", func(f *Frame) { f.Keys = []Key{{Text: "a; kill-server"}} }, "keys[0]"},
		{FrameSendKeys, "no attempt", func(f *Frame) { f.Attempt = nil }, "attempt"},

		{FrameSignalAck, "unknown result", func(f *Frame) { f.Result = "maybe" }, "result"},
		{FrameSignalAck, "no result nor code", func(f *Frame) { f.Result = "" }, "result"},
		{FrameSignalAck, "unknown kind", func(f *Frame) { f.Kind = "exploded" }, "kind"},
		{FrameSignalAck, "negative seq", func(f *Frame) { f.Seq = i64(-1) }, "seq"},
		{FrameSignalAck, "bad code", func(f *Frame) { f.Code = "Not Found" }, "code"},
		{FrameSignalAck, "error message too long", func(f *Frame) { f.Code = "x"; f.Message = long(MaxText + 1) }, "message"},
		{FrameSignalAck, "error echoing a huge kind", func(f *Frame) { f.Code = "x"; f.Kind = long(65) }, "kind"},

		{FrameAttachOpen, "bad attach id", func(f *Frame) { f.AttachID = "a1" }, "attach_id"},
		{FrameAttachOpen, "bad run id", func(f *Frame) { f.RunID = "../etc" }, "run_id"},
		{FrameAttachOpen, "session of another run", func(f *Frame) { f.SessionName = "pam-0b0b0b0b" }, "session_name"},
		{FrameAttachOpen, "rows only", func(f *Frame) { f.Cols = 0 }, "cols"},
		{FrameAttachOpen, "too wide", func(f *Frame) { f.Cols = MaxTermSize + 1 }, "cols"},
		{FrameAttachOpen, "negative rows", func(f *Frame) { f.Rows = -1 }, "rows"},

		{FrameAttachInput, "bad attach id", func(f *Frame) { f.AttachID = "" }, "attach_id"},
		{FrameAttachInput, "too many bytes", func(f *Frame) { f.Bytes = make([]byte, MaxAttachChunk+1) }, "bytes"},
		{FrameAttachResize, "zero size", func(f *Frame) { f.Rows, f.Cols = 0, 0 }, "rows"},
		{FrameAttachResize, "too tall", func(f *Frame) { f.Rows = MaxTermSize + 1 }, "rows"},
		{FrameAttachClose, "bad attach id", func(f *Frame) { f.AttachID = strings.ToUpper(tAttach) }, "attach_id"},

		{FrameLogRequest, "bad request id", func(f *Frame) { f.RequestID = "q" }, "request_id"},
		{FrameLogRequest, "bad run id", func(f *Frame) { f.RunID = "nope" }, "run_id"},
		{FrameLogRequest, "negative offset", func(f *Frame) { f.Offset = i64(-1) }, "offset"},

		{FrameError, "no code", func(f *Frame) { f.Code = "" }, "code"},
		{FrameError, "code too long", func(f *Frame) { f.Code = long(maxCode + 1) }, "code"},
		{FrameError, "message too long", func(f *Frame) { f.Message = strings.Repeat("é", MaxText+1) }, "message"},
		{FrameError, "message not UTF-8", func(f *Frame) { f.Message = "\xff" }, "message"},
		{FrameError, "bad run id", func(f *Frame) { f.RunID = "x" }, "run_id"},

		{FrameHeartbeat, "bad host id", func(f *Frame) { f.HostID = "host-1" }, "host_id"},
		{FrameHeartbeat, "bad instance id", func(f *Frame) { f.InstanceID = "me" }, "instance_id"},

		{FrameRunDispatchAck, "no accepted", func(f *Frame) { f.Accepted = nil }, "accepted"},
		{FrameRunDispatchAck, "no attempt", func(f *Frame) { f.Attempt = nil }, "attempt"},
		{FrameRunDispatchAck, "bad run id", func(f *Frame) { f.RunID = "../../etc/passwd" }, "run_id"},
		{FrameRunDispatchAck, "reason too long", func(f *Frame) { f.Reason = long(MaxText + 1) }, "reason"},
		{FrameRunDispatchAck, "reason with NUL", func(f *Frame) { f.Reason = "no\x00" }, "reason"},

		{FrameSnapshot, "no attempt", func(f *Frame) { f.Attempt = nil }, "attempt"},
		{FrameSnapshot, "capture too large", func(f *Frame) { f.Capture = long(MaxCapture + 1) }, "capture"},

		{FrameSignal, "bad run id", func(f *Frame) { f.RunID = "" }, "run_id"},
		{FrameSignal, "attempt 0", func(f *Frame) { f.Attempt = IntPtr(0) }, "attempt"},
		{FrameSignal, "unknown kind", func(f *Frame) { f.Kind = "exploded" }, "kind"},
		{FrameSignal, "manual source", func(f *Frame) { f.Source = SourceManual }, "source"},
		{FrameSignal, "no source", func(f *Frame) { f.Source = "" }, "source"},
		{FrameSignal, "negative seq", func(f *Frame) { f.Seq = i64(-5) }, "seq"},
		{FrameSignal, "payload not JSON", func(f *Frame) { f.Payload = json.RawMessage(`{"exit_code":`) }, "payload"},
		{FrameSignal, "payload too large", func(f *Frame) { f.Payload = json.RawMessage(`"` + long(MaxPayload) + `"`) }, "payload"},
		{FrameSignal, "payload with NUL", func(f *Frame) { f.Payload = json.RawMessage(`{"exit_code":0,"x":["\u0000"]}`) }, "payload"},
		{FrameSignal, "payload key with NUL", func(f *Frame) { f.Payload = json.RawMessage(`{"\u0000":1}`) }, "payload"},

		{FrameLogChunk, "bad request id", func(f *Frame) { f.RequestID = "all" }, "request_id"},
		{FrameLogChunk, "no run id", func(f *Frame) { f.RunID = "" }, "run_id"},
		{FrameLogChunk, "text too long", func(f *Frame) { f.Text = long(MaxLogChunk + 1) }, "text"},

		{FrameRunState, "unknown state", func(f *Frame) { f.State = "exploded" }, "state"},
		{FrameRunState, "no run id", func(f *Frame) { f.RunID = "" }, "run_id"},
		{FrameRunState, "no attempt", func(f *Frame) { f.Attempt = nil }, "attempt"},
		{FrameRunState, "orphan with an attempt but no run", func(f *Frame) { f.State, f.RunID = StateOrphanDetected, "" }, "attempt"},
		{FrameRunState, "detail too long", func(f *Frame) { f.Detail = strings.Repeat("€", MaxText+1) }, "detail"},
		{FrameRunState, "detail with NUL", func(f *Frame) { f.Detail = "\x00" }, "detail"},

		{FrameAttachOutput, "bad attach id", func(f *Frame) { f.AttachID = "a1" }, "attach_id"},
		{FrameAttachOutput, "too many bytes", func(f *Frame) { f.Bytes = make([]byte, MaxAttachChunk+1) }, "bytes"},
		{FrameAttachClosed, "bad attach id", func(f *Frame) { f.AttachID = "" }, "attach_id"},
		{FrameAttachClosed, "reason too long", func(f *Frame) { f.Reason = long(5000) }, "reason"},
	}
	valid := validFrames()
	for _, c := range cases {
		f := valid[c.typ]
		if c.typ == "" {
			f = valid[FrameHeartbeat]
		}
		c.mod(&f)
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
		if !strings.HasPrefix(e.Message, f.Type+": ") && c.typ != "" {
			t.Errorf("%s %s: message %q does not start with the frame type", c.typ, c.what, e.Message)
		}
		if len(e.Message) > 300 {
			t.Errorf("%s %s: message of %d bytes", c.typ, c.what, len(e.Message))
		}
	}
}

// Every field of Frame is known to Validate, so none escapes the check
// that a frame carries only the fields of its type.
func TestFrameFieldsComplete(t *testing.T) {
	known := map[string]bool{"type": true}
	for _, f := range frameFields {
		known[f.name] = true
	}
	rt := reflect.TypeFor[Frame]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if !known[name] {
			t.Errorf("Frame field %s (%s) is not in frameFields", rt.Field(i).Name, name)
		}
		delete(known, name)
	}
	for name := range known {
		t.Errorf("frameFields names %s, which Frame does not have", name)
	}
	for typ, rule := range frameChecks {
		for _, name := range strings.Fields(rule.fields) {
			if name == "type" || !slices.ContainsFunc(frameFields, func(f frameField) bool { return f.name == name }) {
				t.Errorf("%s allows unknown field %s", typ, name)
			}
		}
	}
}

func TestBoundText(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("é", MaxText), strings.Repeat("é", MaxText+1), strings.Repeat("x", 5000) + "\x00\xff", "a\x00b\xffc"} {
		out := BoundText(s)
		f := Frame{Type: FrameError, Code: "x", Message: out}
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
