package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestWireFieldsNeverOmitted: every field the contract names is on the
// wire, null, [] or {} when empty, never left out — for the object shapes
// of the REST and internal APIs (every json field of these types), and
// for each uplink frame type (the fields the contract lists for it).
func TestWireFieldsNeverOmitted(t *testing.T) {
	// Output shapes: all their fields are the contract's. Request bodies
	// whose fields the contract marks optional (`x?`) are left out, and
	// so are Signal's seq? and payload?.
	shapes := []any{Project{}, WorkItem{}, Run{}, Host{}, Event{}, ProjectList{}, WorkItemList{}, EventList{}, RunList{}, HostList{},
		Pane{}, PaneSnapshot{}, KeysResult{}, MessageResult{}, HostCreated{}, WorkerToken{}, ProviderHosts{}, ProviderList{}, WSTicket{}, Health{},
		Error{}, Envelope{}, Register{}, Registered{}, WorkerRun{}, WorkerRunList{}, RunAttempt{}, SignalResult{}, Signal{}}
	optional := map[string]bool{"Signal.seq": true, "Signal.payload": true}
	for _, v := range shapes {
		typ := reflect.TypeOf(v)
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", typ.Name(), err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %s: %v", typ.Name(), b, err)
		}
		for i := range typ.NumField() {
			tag := typ.Field(i).Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if name == "-" || name == "" || optional[typ.Name()+"."+name] {
				continue
			}
			if _, ok := got[name]; !ok {
				t.Errorf("%s.%s is omitted when empty: %s", typ.Name(), name, b)
			}
		}
	}

	// Uplink frames (docs/architecture.md#uplink-frames): what each type
	// carries is listed here, from the contract, and checked on the
	// encoding of each type's empty frame.
	frames := map[string]string{
		FrameHeartbeatAck:   "timestamp",
		FrameRunDispatch:    "run_id task_id provider session_name attempt cwd prompt args task_title signal_token",
		FrameRunStop:        "run_id attempt force",
		FrameSendKeys:       "run_id attempt keys",
		FrameSignalAck:      "run_id attempt kind seq",
		FrameAttachOpen:     "attach_id run_id session_name rows cols",
		FrameAttachInput:    "attach_id bytes",
		FrameAttachResize:   "attach_id rows cols",
		FrameAttachClose:    "attach_id",
		FrameLogRequest:     "request_id run_id offset",
		FrameError:          "code message",
		FramePaneWatch:      "run_id attempt",
		FrameHeartbeat:      "host_id instance_id timestamp",
		FrameRunDispatchAck: "run_id attempt accepted reason",
		FrameSnapshot:       "run_id attempt capture timestamp",
		FrameSignal:         "run_id kind attempt seq source payload timestamp",
		FrameLogChunk:       "run_id text timestamp",
		FrameRunState:       "run_id attempt state detail",
		FrameAttachOutput:   "attach_id bytes",
		FrameAttachClosed:   "attach_id reason",

		FrameWorkspaceRequest: "request_id run_id op",
		FrameWorkspaceReply:   "request_id run_id text eof",
		FrameWorkspaceReady:   "run_id attempt workspace",
		FrameWorkspaceRemoved: "run_id workspace reason",
		FrameWorkspacePushed:  "run_id workspace ok detail",
		FrameScreen:           "run_id attempt attention working text choices resets_at",
	}
	if len(frames) != len(frameDecoders) {
		t.Errorf("%d frame types listed, %d known", len(frames), len(frameDecoders))
	}
	for typ, fields := range frames {
		empty, err := DecodeFrame([]byte(`{"type":"` + typ + `"}`))
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		b, err := json.Marshal(empty)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %s: %v", typ, b, err)
		}
		for _, name := range strings.Fields(fields) {
			if _, ok := got[name]; !ok {
				t.Errorf("%s frame omits %s when empty: %s", typ, name, b)
			}
		}
		if len(got) != len(strings.Fields(fields))+1 {
			t.Errorf("%s frame carries more than its fields when empty: %s", typ, b)
		}
		// What is encoded decodes to the same frame.
		back, err := DecodeFrame(b)
		again, _ := json.Marshal(back)
		if err != nil || back.Type() != typ || !bytes.Equal(again, b) {
			t.Errorf("%s: %s decodes to %+v (%s), %v", typ, b, back, again, err)
		}
	}
	// A dispatch with no args still says so, and a filled frame is unchanged.
	b, _ := json.Marshal(RunDispatchFrame{RunID: "r", Args: nil})
	if !strings.Contains(string(b), `"args":[]`) || !strings.Contains(string(b), `"run_id":"r"`) {
		t.Errorf("run_dispatch without args: %s", b)
	}
}
