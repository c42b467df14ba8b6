package wiretest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"pam/internal/wire"
)

// TestFrameFieldsAreFramesFields: every field the loose view reads is a
// field of some frame type (with the same JSON type), so that a test
// asserting on it reads what a peer can send, not a field that no longer
// exists.
func TestFrameFieldsAreFramesFields(t *testing.T) {
	types := []string{wire.FrameHeartbeatAck, wire.FrameRunDispatch, wire.FrameRunStop, wire.FrameSendKeys, wire.FrameSignalAck,
		wire.FrameAttachOpen, wire.FrameAttachInput, wire.FrameAttachResize, wire.FrameAttachClose, wire.FrameLogRequest, wire.FrameError,
		wire.FramePaneWatch, wire.FrameWorkspaceRequest, wire.FrameHeartbeat, wire.FrameRunDispatchAck, wire.FrameSnapshot, wire.FrameSignal,
		wire.FrameLogChunk, wire.FrameRunState, wire.FrameAttachOutput, wire.FrameAttachClosed, wire.FrameScreen, wire.FrameWorkspaceReply,
		wire.FrameWorkspaceReady, wire.FrameWorkspaceRemoved, wire.FrameWorkspacePushed}
	rt := reflect.TypeFor[Frame]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name == "type" {
			continue
		}
		zero, err := json.Marshal(reflect.New(rt.Field(i).Type).Elem().Interface())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, typ := range types {
			f, err := wire.DecodeFrame([]byte(`{"type":"` + typ + `","` + name + `":` + string(zero) + `}`))
			if f != nil && err == nil {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("wiretest.Frame reads %s, which no frame type carries", name)
		}
	}
}
