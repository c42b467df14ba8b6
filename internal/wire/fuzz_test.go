package wire

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// The fuzz targets' oracles restate the contract's rules on their own
// (regular expressions, literal lists) rather than calling the code under
// test, so that a rule lost from Validate is a failure, not a tautology.
var (
	lowerUUID   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	sessionLike = regexp.MustCompile(`^pam-[0-9a-f]{8}$`)
	// contractFields are the fields of each frame of docs/architecture.md#internal-api (error also names
	// the refused frame's run; signal_ack also carries an error's code and
	// message).
	contractFields = map[string]string{
		FrameHeartbeatAck:   "timestamp",
		FrameRunDispatch:    "run_id task_id provider session_name attempt cwd prompt args task_title signal_token repo project_id workspace agent_session_id text",
		FrameRunStop:        "run_id attempt force",
		FrameSendKeys:       "run_id attempt keys",
		FrameSignalAck:      "run_id attempt kind seq result code message",
		FrameAttachOpen:     "attach_id run_id session_name rows cols",
		FrameAttachInput:    "attach_id bytes",
		FrameAttachResize:   "attach_id rows cols",
		FrameAttachClose:    "attach_id",
		FrameLogRequest:     "request_id run_id offset",
		FrameError:          "code message run_id",
		FramePaneWatch:      "run_id attempt",
		FrameHeartbeat:      "host_id instance_id timestamp",
		FrameRunDispatchAck: "run_id attempt accepted reason",
		FrameSnapshot:       "run_id attempt capture timestamp",
		FrameSignal:         "run_id kind attempt seq source payload timestamp",
		FrameLogChunk:       "run_id text timestamp request_id eof",
		FrameRunState:       "run_id attempt state detail",
		FrameAttachOutput:   "attach_id bytes",
		FrameAttachClosed:   "attach_id reason",
		// Workspaces (docs/architecture.md#workspaces).
		FrameWorkspaceRequest: "request_id run_id op part commit",
		FrameWorkspaceReply:   "request_id run_id text eof code message commit",
		FrameWorkspaceReady:   "run_id attempt workspace",
		FrameWorkspaceRemoved: "run_id workspace reason",
		FrameWorkspacePushed:  "run_id workspace ok detail",
		// What the screen asks (docs/architecture.md#the-screen-is-read).
		FrameScreen: "run_id attempt attention working text choices resets_at",
	}
)

// FuzzDecodeFrame feeds hostile bytes to what both ends of the uplink run
// on every frame. Whatever the input: no panic; no frame comes with an
// error, except a frame with a field its type does not carry, which comes
// with a wire error naming it as a refusal of Validate does; a
// frame Validate accepts is within every bound of the contract (checked
// by the oracle below) and survives encode → decode → encode unchanged;
// a refusal is a wire error naming a field, with a short message.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range validFrames() {
		b, err := json.Marshal(fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`not json`, `{}`, `[]`, `null`, `{"type":""}`, `{"type":"no_such_frame"}`,
		`{"type":"signal","bogus":1}`, `{"type":"heartbeat"} {}`,
		`{"type":"run_stop","run_id":"../x"}`,
		`{"type":"send_keys","run_id":"0a0a0a0a-1111-4111-8111-111111111111","attempt":1,"keys":[{"key":"C-b"}]}`,
		`{"type":"attach_open","attach_id":"a1"}`,
		`{"type":"attach_input","attach_id":"aaaaaaaa-0000-4000-8000-000000000001","bytes":"!!"}`,
		`{"type":"run_state","state":"orphan_detected","detail":"session pam-00000000"}`,
		`{"type":"run_state","run_id":"0a0a0a0a-1111-4111-8111-111111111111","attempt":1,"state":"session_lost","detail":"a\u0000b"}`,
		`{"type":"signal","run_id":"0a0a0a0a-1111-4111-8111-111111111111","attempt":1,"kind":"progress","seq":-1,"source":"wrapper"}`,
		`{"type":"signal","run_id":"0a0a0a0a-1111-4111-8111-111111111111","attempt":1,"kind":"progress","seq":2,"source":"wrapper","payload":{"x":"\u0000"}}`,
		`{"type":"signal","run_id":"0a0a0a0a-1111-4111-8111-111111111111","attempt":1,"kind":"started","source":"wrapper","payload": [ 1 , 2 ] }`,
		`{"type":"heartbeat","timestamp":"2025-05-01T12:00:00+23:59"}`,
		`{"type":"heartbeat","timestamp":"0000-01-01T00:00:00Z"}`,
		`{"type":"attach_resize","attach_id":"aaaaaaaa-0000-4000-8000-000000000001","rows":1e3,"cols":80}`,
		`{"type":"attach_open","attach_id":"aaaaaaaa-0000-4000-8000-000000000001","run_id":"0a0a0a0a-1111-4111-8111-111111111111","session_name":"pam-0a0a0a0a","rows":0,"cols":0}`,
		`{"type":"error","code":"x","message":"` + strings.Repeat("é", MaxText+1) + `"}`,
		`{"type":"send_keys","run_id":"0a0a0a0a-1111-4111-8111-111111111111","attempt":1,"keys":[{"key":"` + strings.Repeat("K", 3000) + `"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeFrame(data)
		if fr == nil {
			if err == nil {
				t.Fatal("no frame and no error")
			}
			return
		}
		if _, known := contractFields[fr.Type()]; !known {
			t.Fatalf("decoded a frame of unknown type %q", fr.Type())
		}
		if err == nil {
			err = fr.Validate() // a field its type does not carry is refused like a bad value
		}
		if err != nil {
			e, ok := AsError(err)
			if !ok {
				t.Fatalf("Validate error %v is not a wire error", err)
			}
			if field, _ := e.Details["field"].(string); field == "" && e.Code != CodeKeyNotAllowed {
				t.Fatalf("refusal without a field: %+v", e)
			}
			if len(e.Message) > 400 {
				t.Fatalf("refusal message of %d bytes: %.200q", len(e.Message), e.Message)
			}
			return
		}
		inBounds(t, fr)
		again, err := json.Marshal(fr)
		if err != nil {
			t.Fatalf("encode an accepted frame: %v", err)
		}
		if len(again) > MaxFrame {
			return // JSON escapes <, > and & six bytes long: it may not fit again
		}
		back, err := DecodeFrame(again)
		if err != nil {
			t.Fatalf("decode %s: %v", again, err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("round trip of %s refused: %v", again, err)
		}
		third, err := json.Marshal(back)
		if err != nil || !bytes.Equal(third, again) {
			t.Fatalf("round trip changed the frame:\n%s\n%s (%v)", again, third, err)
		}
	})
}

// loose is any frame's encoding read back without the typed structs, for
// the oracle: it judges what goes on the wire.
type loose struct {
	Type           string          `json:"type"`
	RunID          string          `json:"run_id"`
	Attempt        *int            `json:"attempt"`
	Timestamp      *time.Time      `json:"timestamp"`
	HostID         string          `json:"host_id"`
	TaskID         string          `json:"task_id"`
	SessionName    string          `json:"session_name"`
	Cwd            string          `json:"cwd"`
	Prompt         string          `json:"prompt"`
	Args           []string        `json:"args"`
	SignalToken    string          `json:"signal_token"`
	AgentSessionID string          `json:"agent_session_id"`
	Accepted       *bool           `json:"accepted"`
	Reason         string          `json:"reason"`
	Keys           []Key           `json:"keys"`
	Kind           string          `json:"kind"`
	Seq            *int64          `json:"seq"`
	Source         string          `json:"source"`
	Payload        json.RawMessage `json:"payload"`
	Result         string          `json:"result"`
	Text           string          `json:"text"`
	RequestID      string          `json:"request_id"`
	Offset         *int64          `json:"offset"`
	State          string          `json:"state"`
	Detail         string          `json:"detail"`
	Attention      string          `json:"attention"`
	Choices        []Choice        `json:"choices"`
	Repo           *Repo           `json:"repo"`
	Workspace      *Workspace      `json:"workspace"`
	AttachID       string          `json:"attach_id"`
	Rows           int             `json:"rows"`
	Cols           int             `json:"cols"`
	Code           string          `json:"code"`
	Message        string          `json:"message"`
}

// inBounds is the oracle: the contract's rules for a frame Validate took,
// judged on its encoding.
func inBounds(t *testing.T, fr Frame) {
	t.Helper()
	b, err := json.Marshal(fr)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	var f loose
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("read back %s: %v", b, err)
	}
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatalf("read back %s: %v", b, err)
	}
	if string(f.Payload) == "null" {
		f.Payload = nil
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s accepted with "+format, append([]any{f.Type}, args...)...)
	}
	if f.Type != fr.Type() {
		fail("type %q on the wire", f.Type)
	}
	allowed := strings.Fields(contractFields[f.Type])
	for name := range keys {
		if name != "type" && !slices.Contains(allowed, name) {
			fail("field %s", name)
		}
	}
	id := func(name, v string) {
		t.Helper()
		if !lowerUUID.MatchString(v) {
			fail("%s %q", name, v)
		}
	}
	// noOption: nothing that reaches git's argv starts with '-' or holds
	// a control character (docs/architecture.md#workspaces).
	noOption := func(name, v string) {
		t.Helper()
		if v == "" || v[0] == '-' || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			fail("%s %q", name, v)
		}
	}
	attempt := func() {
		t.Helper()
		if f.Attempt == nil || *f.Attempt < 1 {
			fail("attempt %v", f.Attempt)
		}
	}
	text := func(name, s string, max int) {
		t.Helper()
		if utf8.RuneCountInString(s) > max || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			fail("%s of %d characters", name, utf8.RuneCountInString(s))
		}
	}
	session := func() {
		t.Helper()
		if !sessionLike.MatchString(f.SessionName) || f.SessionName[4:] != f.RunID[:8] {
			fail("session_name %q for run %s", f.SessionName, f.RunID)
		}
	}
	size := func(zeroOK bool) {
		t.Helper()
		if zeroOK && f.Rows == 0 && f.Cols == 0 {
			return
		}
		if f.Rows < 1 || f.Rows > 1000 || f.Cols < 1 || f.Cols > 1000 {
			fail("size %dx%d", f.Rows, f.Cols)
		}
	}
	if f.Timestamp != nil {
		if _, err := f.Timestamp.MarshalJSON(); err != nil {
			fail("timestamp %v", f.Timestamp)
		}
	}
	if f.Seq != nil && *f.Seq < 0 {
		fail("seq %d", *f.Seq)
	}
	if f.Offset != nil && *f.Offset < 0 {
		fail("offset %d", *f.Offset)
	}
	text("detail", f.Detail, 1000)
	text("reason", f.Reason, 1000)
	text("message", f.Message, 1000)
	switch f.Type {
	case FrameRunDispatch:
		id("run_id", f.RunID)
		id("task_id", f.TaskID)
		attempt()
		session()
		if len(f.Prompt) > 64<<10 || len(f.Args) > 64 || strings.ContainsRune(f.Prompt, 0) || (f.Cwd != "" && f.Cwd[0] != '/') {
			fail("prompt, args or cwd out of bounds")
		}
		for _, a := range f.Args {
			if len(a) > 4096 || strings.ContainsRune(a, 0) {
				fail("arg %.40q", a)
			}
		}
		if f.SignalToken == "" || strings.ContainsAny(f.SignalToken, " \r\n\t\x00") {
			fail("signal_token %q", f.SignalToken)
		}
		if f.Workspace != nil {
			noOption("workspace.branch", f.Workspace.Branch)
		}
		if f.Repo != nil {
			noOption("repo.url", f.Repo.URL)
			if f.Repo.Base != "" {
				noOption("repo.base", f.Repo.Base)
			}
		}
		// The session id of a resume reaches the CLI's argv: never an
		// option, no space, bounded; its message comes only with one.
		if f.AgentSessionID != "" {
			noOption("agent_session_id", f.AgentSessionID)
			if len(f.AgentSessionID) > 200 || strings.ContainsAny(f.AgentSessionID, " \t\r\n\x00") {
				fail("agent_session_id %.40q", f.AgentSessionID)
			}
		} else if f.Text != "" {
			fail("a resume message without a session")
		}
	case FrameRunStop, FrameRunDispatchAck, FrameSnapshot:
		id("run_id", f.RunID)
		attempt()
		if f.Type == FrameRunDispatchAck && f.Accepted == nil {
			fail("no accepted")
		}
	case FrameSendKeys:
		id("run_id", f.RunID)
		attempt()
		keysInBounds(t, f.Keys)
	case FrameSignalAck:
		if f.Code == "" {
			id("run_id", f.RunID)
			attempt()
			if !slices.Contains([]string{"applied", "stale_attempt", "duplicate", "out_of_order", "stale_offer", "ignored"}, f.Result) {
				fail("result %q", f.Result)
			}
		} else if len(f.RunID) > 64 || len(f.Kind) > 64 {
			fail("an echo of %d bytes", len(f.RunID)+len(f.Kind))
		}
	case FrameSignal:
		id("run_id", f.RunID)
		if f.Attempt != nil && *f.Attempt < 1 {
			fail("attempt %d", *f.Attempt)
		}
		if !slices.Contains([]string{"started", "finished", "completed", "failed", "progress"}, f.Kind) || !slices.Contains([]string{"wrapper", "provider-hook"}, f.Source) {
			fail("kind %q source %q", f.Kind, f.Source)
		}
		if len(f.Payload) > 64<<10 || (len(f.Payload) > 0 && !json.Valid(f.Payload)) {
			fail("payload of %d bytes", len(f.Payload))
		}
	case FrameAttachOpen:
		id("attach_id", f.AttachID)
		id("run_id", f.RunID)
		session()
		size(true)
	case FrameAttachResize:
		id("attach_id", f.AttachID)
		size(false)
	case FrameAttachInput, FrameAttachOutput, FrameAttachClose, FrameAttachClosed:
		id("attach_id", f.AttachID)
	case FrameLogRequest, FrameLogChunk, FrameWorkspaceRequest, FrameWorkspaceReply:
		id("request_id", f.RequestID)
		id("run_id", f.RunID)
	case FrameWorkspaceReady, FrameWorkspaceRemoved, FrameWorkspacePushed:
		id("run_id", f.RunID)
		if f.Workspace == nil || f.Workspace.Path == "" || f.Workspace.Path[0] != '/' {
			fail("workspace %+v", f.Workspace)
		}
		noOption("workspace.branch", f.Workspace.Branch)
	case FrameRunState:
		if !slices.Contains([]string{"session_lost", "spawn_failed", "tmux_crash", "stale_session", "orphan_detected", "wrapper_died", "workspace_failed"}, f.State) {
			fail("state %q", f.State)
		}
		if f.RunID != "" || f.State != StateOrphanDetected {
			id("run_id", f.RunID)
			attempt()
		}
	case FrameScreen:
		id("run_id", f.RunID)
		attempt()
		if !slices.Contains([]string{"none", "needs_input", "rate_limited"}, f.Attention) || len(f.Text) > 1000 || len(f.Choices) > 12 {
			fail("attention %q, text of %d bytes, %d choices", f.Attention, len(f.Text), len(f.Choices))
		}
		if strings.ContainsAny(f.Text, "\x00\x1b\r\u009b\u202e") || !utf8.ValidString(f.Text) {
			fail("text %.40q", f.Text)
		}
		for _, c := range f.Choices {
			if !regexp.MustCompile(`^[0-9yn]$`).MatchString(c.Key) || len(c.Label) > 1000 || strings.ContainsAny(c.Label, "\x00\x1b\n\u009b\u202e") {
				fail("choice %+v", c)
			}
		}
	case FrameError:
		if f.Code == "" || strings.ToLower(f.Code) != f.Code || strings.ContainsAny(f.Code, " \x00") {
			fail("code %q", f.Code)
		}
	case FrameHeartbeat:
		if f.HostID != "" {
			id("host_id", f.HostID)
		}
	}
}

// keysInBounds is the keys allowlist (docs/api.md#keys), restated.
func keysInBounds(t *testing.T, keys []Key) {
	t.Helper()
	if len(keys) < 1 || len(keys) > 64 {
		t.Fatalf("%d key entries accepted", len(keys))
	}
	named := regexp.MustCompile(`^(Enter|Escape|Tab|BTab|Space|BSpace|DC|Up|Down|Left|Right|Home|End|PageUp|PageDown|C-c|C-d|[0-9]|y|n)$`)
	total := 0
	for i, k := range keys {
		set := 0
		for _, s := range []string{k.Key, k.Text, k.Paste} {
			if s != "" {
				set++
			}
		}
		switch {
		case set != 1:
			t.Fatalf("keys[%d] has %d of key, text and paste", i, set)
		case k.Key != "":
			if !named.MatchString(k.Key) {
				t.Fatalf("keys[%d]: key %q accepted", i, k.Key)
			}
		case k.Text != "":
			total += len(k.Text)
			for _, c := range []byte(k.Text) {
				if c < 0x20 || c > 0x7e || strings.IndexByte("|&;$`", c) >= 0 {
					t.Fatalf("keys[%d]: text %q accepted", i, k.Text)
				}
			}
		default:
			total += len(k.Paste)
			if !utf8.ValidString(k.Paste) {
				t.Fatalf("keys[%d]: paste %q is not UTF-8", i, k.Paste)
			}
			for _, r := range k.Paste {
				// No C0 or C1 control but the newline (ESC would end a
				// bracketed paste or start a sequence), no DEL, no
				// format character (bidi overrides).
				if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) || unicode.Is(unicode.Cf, r) {
					t.Fatalf("keys[%d]: paste %q accepted", i, k.Paste)
				}
			}
		}
	}
	if total > 4096 {
		t.Fatalf("%d bytes of text and paste accepted", total)
	}
}

// FuzzValidateKeys feeds hostile keys requests to the keys allowlist (docs/api.md#keys), which
// the server and the worker both apply: what it accepts is within the
// allowlist; what it refuses is a 400 naming the entry (key_not_allowed)
// or the list (validation_failed), with a short message.
func FuzzValidateKeys(f *testing.F) {
	for _, s := range []string{
		`[{"key":"Enter"},{"text":"hello"}]`, `[{"key":"C-c"}]`, `[{"text":"-t"},{"key":"Enter"}]`,
		`[{"text":"x -- y"},{"key":"BSpace"},{"key":"DC"},{"key":"C-d"}]`,
		`[]`, `[{}]`, `[{"key":"C-b"}]`, `[{"key":"Enter;"}]`, `[{"key":"-t"}]`, `[{"key":"Enter","text":"x"}]`,
		`[{"text":"$(touch /tmp/x)"}]`, `[{"text":"a; b"}]`, "[{\"text\":\"`id`\"}]", `[{"text":"\u001b[2J"}]`, `[{"text":"é"}]`,
		`[{"key":"` + strings.Repeat("K", 3000) + `"}]`,
		`[{"text":"` + strings.Repeat("a", 4097) + `"}]`,
		`[{"key":"1"},{"key":"y"},{"key":"Escape"},{"key":"BTab"},{"key":"Up"},{"key":"PageDown"},{"key":"Space"}]`,
		`[{"key":"10"}]`, `[{"key":"Y"}]`, `[{"key":"F1"}]`, `[{"key":"M-x"}]`, `[{"key":"C-b"},{"key":"1"}]`,
		`[{"paste":"line one\nline two; $(x) | y"},{"key":"Enter"}]`, `[{"paste":"caf\u00e9 \u2713"}]`,
		`[{"paste":"\u001b[201~"}]`, `[{"paste":"a\rb"}]`, `[{"paste":"a\tb"}]`, `[{"paste":"\u009b2J"}]`, `[{"paste":"\u202e"}]`,
		`[{"paste":"x","text":"y"}]`, `[{"paste":"x","key":"Enter"}]`,
		`[{"paste":"` + strings.Repeat("b", 2048) + `"},{"text":"` + strings.Repeat("a", 2049) + `"}]`,
		`[` + strings.Repeat(`{"key":"Enter"},`, 64) + `{"key":"Enter"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var keys []Key
		if json.Unmarshal(data, &keys) != nil {
			return
		}
		err := ValidateKeys(keys)
		if err == nil {
			keysInBounds(t, keys)
			return
		}
		e, ok := AsError(err)
		if !ok || e.Status != 0 {
			t.Fatalf("refusal %v is not a wire error carrying only its code (the server maps codes to statuses)", err)
		}
		switch e.Code {
		case CodeKeyNotAllowed:
			i, ok := e.Details["index"].(int)
			if !ok || i < 0 || i >= len(keys) {
				t.Fatalf("key_not_allowed names entry %v of %d", e.Details["index"], len(keys))
			}
		case CodeValidationFailed:
			if len(keys) >= 1 && len(keys) <= MaxKeyEntries {
				t.Fatalf("validation_failed for %d entries: %v", len(keys), err)
			}
		default:
			t.Fatalf("refusal code %s", e.Code)
		}
		if len(e.Message) > 400 {
			t.Fatalf("refusal message of %d bytes: %.200q", len(e.Message), e.Message)
		}
	})
}
