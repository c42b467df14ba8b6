package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// The codec of uplink frames: each type's name, its encoding (the type
// written first, then the struct's own fields), its Validate (the rules
// are in framecheck.go), the run it names, and its strict decoding.

// Type names a frame's type on the wire.
func (HeartbeatAckFrame) Type() string     { return FrameHeartbeatAck }
func (RunDispatchFrame) Type() string      { return FrameRunDispatch }
func (RunStopFrame) Type() string          { return FrameRunStop }
func (SendKeysFrame) Type() string         { return FrameSendKeys }
func (SignalAckFrame) Type() string        { return FrameSignalAck }
func (AttachOpenFrame) Type() string       { return FrameAttachOpen }
func (AttachInputFrame) Type() string      { return FrameAttachInput }
func (AttachResizeFrame) Type() string     { return FrameAttachResize }
func (AttachCloseFrame) Type() string      { return FrameAttachClose }
func (LogRequestFrame) Type() string       { return FrameLogRequest }
func (ErrorFrame) Type() string            { return FrameError }
func (PaneWatchFrame) Type() string        { return FramePaneWatch }
func (WorkspaceRequestFrame) Type() string { return FrameWorkspaceRequest }
func (HeartbeatFrame) Type() string        { return FrameHeartbeat }
func (RunDispatchAckFrame) Type() string   { return FrameRunDispatchAck }
func (SnapshotFrame) Type() string         { return FrameSnapshot }
func (SignalFrame) Type() string           { return FrameSignal }
func (LogChunkFrame) Type() string         { return FrameLogChunk }
func (RunStateFrame) Type() string         { return FrameRunState }
func (AttachOutputFrame) Type() string     { return FrameAttachOutput }
func (AttachClosedFrame) Type() string     { return FrameAttachClosed }
func (ScreenFrame) Type() string           { return FrameScreen }
func (WorkspaceReplyFrame) Type() string   { return FrameWorkspaceReply }
func (WorkspaceReadyFrame) Type() string   { return FrameWorkspaceReady }
func (WorkspaceRemovedFrame) Type() string { return FrameWorkspaceRemoved }
func (WorkspacePushedFrame) Type() string  { return FrameWorkspacePushed }

func (f HeartbeatAckFrame) MarshalJSON() ([]byte, error) {
	type plain HeartbeatAckFrame
	return withType(FrameHeartbeatAck, plain(f))
}
func (f RunDispatchFrame) MarshalJSON() ([]byte, error) {
	type plain RunDispatchFrame
	return withType(FrameRunDispatch, plain(f))
}
func (f RunStopFrame) MarshalJSON() ([]byte, error) {
	type plain RunStopFrame
	return withType(FrameRunStop, plain(f))
}
func (f SendKeysFrame) MarshalJSON() ([]byte, error) {
	type plain SendKeysFrame
	return withType(FrameSendKeys, plain(f))
}
func (f SignalAckFrame) MarshalJSON() ([]byte, error) {
	type plain SignalAckFrame
	return withType(FrameSignalAck, plain(f))
}
func (f AttachOpenFrame) MarshalJSON() ([]byte, error) {
	type plain AttachOpenFrame
	return withType(FrameAttachOpen, plain(f))
}
func (f AttachInputFrame) MarshalJSON() ([]byte, error) {
	type plain AttachInputFrame
	return withType(FrameAttachInput, plain(f))
}
func (f AttachResizeFrame) MarshalJSON() ([]byte, error) {
	type plain AttachResizeFrame
	return withType(FrameAttachResize, plain(f))
}
func (f AttachCloseFrame) MarshalJSON() ([]byte, error) {
	type plain AttachCloseFrame
	return withType(FrameAttachClose, plain(f))
}
func (f LogRequestFrame) MarshalJSON() ([]byte, error) {
	type plain LogRequestFrame
	return withType(FrameLogRequest, plain(f))
}
func (f ErrorFrame) MarshalJSON() ([]byte, error) {
	type plain ErrorFrame
	return withType(FrameError, plain(f))
}
func (f PaneWatchFrame) MarshalJSON() ([]byte, error) {
	type plain PaneWatchFrame
	return withType(FramePaneWatch, plain(f))
}
func (f WorkspaceRequestFrame) MarshalJSON() ([]byte, error) {
	type plain WorkspaceRequestFrame
	return withType(FrameWorkspaceRequest, plain(f))
}
func (f HeartbeatFrame) MarshalJSON() ([]byte, error) {
	type plain HeartbeatFrame
	return withType(FrameHeartbeat, plain(f))
}
func (f RunDispatchAckFrame) MarshalJSON() ([]byte, error) {
	type plain RunDispatchAckFrame
	return withType(FrameRunDispatchAck, plain(f))
}
func (f SnapshotFrame) MarshalJSON() ([]byte, error) {
	type plain SnapshotFrame
	return withType(FrameSnapshot, plain(f))
}
func (f SignalFrame) MarshalJSON() ([]byte, error) {
	type plain SignalFrame
	return withType(FrameSignal, plain(f))
}
func (f LogChunkFrame) MarshalJSON() ([]byte, error) {
	type plain LogChunkFrame
	return withType(FrameLogChunk, plain(f))
}
func (f RunStateFrame) MarshalJSON() ([]byte, error) {
	type plain RunStateFrame
	return withType(FrameRunState, plain(f))
}
func (f AttachOutputFrame) MarshalJSON() ([]byte, error) {
	type plain AttachOutputFrame
	return withType(FrameAttachOutput, plain(f))
}
func (f AttachClosedFrame) MarshalJSON() ([]byte, error) {
	type plain AttachClosedFrame
	return withType(FrameAttachClosed, plain(f))
}
func (f ScreenFrame) MarshalJSON() ([]byte, error) {
	type plain ScreenFrame
	return withType(FrameScreen, plain(f))
}
func (f WorkspaceReplyFrame) MarshalJSON() ([]byte, error) {
	type plain WorkspaceReplyFrame
	return withType(FrameWorkspaceReply, plain(f))
}
func (f WorkspaceReadyFrame) MarshalJSON() ([]byte, error) {
	type plain WorkspaceReadyFrame
	return withType(FrameWorkspaceReady, plain(f))
}
func (f WorkspaceRemovedFrame) MarshalJSON() ([]byte, error) {
	type plain WorkspaceRemovedFrame
	return withType(FrameWorkspaceRemoved, plain(f))
}
func (f WorkspacePushedFrame) MarshalJSON() ([]byte, error) {
	type plain WorkspacePushedFrame
	return withType(FrameWorkspacePushed, plain(f))
}

// Validate checks a frame's contents (framecheck.go); its error's
// message starts with the frame type.
func (f HeartbeatAckFrame) Validate() error     { return framed(f.Type(), f.check()) }
func (f RunDispatchFrame) Validate() error      { return framed(f.Type(), f.check()) }
func (f RunStopFrame) Validate() error          { return framed(f.Type(), f.check()) }
func (f SendKeysFrame) Validate() error         { return framed(f.Type(), f.check()) }
func (f SignalAckFrame) Validate() error        { return framed(f.Type(), f.check()) }
func (f AttachOpenFrame) Validate() error       { return framed(f.Type(), f.check()) }
func (f AttachInputFrame) Validate() error      { return framed(f.Type(), f.check()) }
func (f AttachResizeFrame) Validate() error     { return framed(f.Type(), f.check()) }
func (f AttachCloseFrame) Validate() error      { return framed(f.Type(), f.check()) }
func (f LogRequestFrame) Validate() error       { return framed(f.Type(), f.check()) }
func (f ErrorFrame) Validate() error            { return framed(f.Type(), f.check()) }
func (f PaneWatchFrame) Validate() error        { return framed(f.Type(), f.check()) }
func (f WorkspaceRequestFrame) Validate() error { return framed(f.Type(), f.check()) }
func (f HeartbeatFrame) Validate() error        { return framed(f.Type(), f.check()) }
func (f RunDispatchAckFrame) Validate() error   { return framed(f.Type(), f.check()) }
func (f SnapshotFrame) Validate() error         { return framed(f.Type(), f.check()) }
func (f SignalFrame) Validate() error           { return framed(f.Type(), f.check()) }
func (f LogChunkFrame) Validate() error         { return framed(f.Type(), f.check()) }
func (f RunStateFrame) Validate() error         { return framed(f.Type(), f.check()) }
func (f AttachOutputFrame) Validate() error     { return framed(f.Type(), f.check()) }
func (f AttachClosedFrame) Validate() error     { return framed(f.Type(), f.check()) }
func (f ScreenFrame) Validate() error           { return framed(f.Type(), f.check()) }
func (f WorkspaceReplyFrame) Validate() error   { return framed(f.Type(), f.check()) }
func (f WorkspaceReadyFrame) Validate() error   { return framed(f.Type(), f.check()) }
func (f WorkspaceRemovedFrame) Validate() error { return framed(f.Type(), f.check()) }
func (f WorkspacePushedFrame) Validate() error  { return framed(f.Type(), f.check()) }

// RunOf is the run a frame names ("" for a frame that names none: a
// heartbeat, an attach frame, an orphan without a run).
func RunOf(f Frame) string {
	if r, ok := f.(interface{ run() string }); ok {
		return r.run()
	}
	return ""
}

func (f RunDispatchFrame) run() string      { return f.RunID }
func (f RunStopFrame) run() string          { return f.RunID }
func (f SendKeysFrame) run() string         { return f.RunID }
func (f SignalAckFrame) run() string        { return f.RunID }
func (f AttachOpenFrame) run() string       { return f.RunID }
func (f LogRequestFrame) run() string       { return f.RunID }
func (f ErrorFrame) run() string            { return f.RunID }
func (f PaneWatchFrame) run() string        { return f.RunID }
func (f WorkspaceRequestFrame) run() string { return f.RunID }
func (f RunDispatchAckFrame) run() string   { return f.RunID }
func (f SnapshotFrame) run() string         { return f.RunID }
func (f SignalFrame) run() string           { return f.RunID }
func (f LogChunkFrame) run() string         { return f.RunID }
func (f RunStateFrame) run() string         { return f.RunID }
func (f ScreenFrame) run() string           { return f.RunID }
func (f WorkspaceReplyFrame) run() string   { return f.RunID }
func (f WorkspaceReadyFrame) run() string   { return f.RunID }
func (f WorkspaceRemovedFrame) run() string { return f.RunID }
func (f WorkspacePushedFrame) run() string  { return f.RunID }

// frameDecoders are the frame types pam knows, each with the strict
// decoding of its struct: the object's "type" is read into the wrapper,
// any other field the struct does not have is refused.
var frameDecoders = map[string]func(*json.Decoder) (Frame, error){
	FrameHeartbeatAck: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			HeartbeatAckFrame
		}
		err := d.Decode(&v)
		return v.HeartbeatAckFrame, err
	},
	FrameRunDispatch: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			RunDispatchFrame
		}
		err := d.Decode(&v)
		return v.RunDispatchFrame, err
	},
	FrameRunStop: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			RunStopFrame
		}
		err := d.Decode(&v)
		return v.RunStopFrame, err
	},
	FrameSendKeys: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			SendKeysFrame
		}
		err := d.Decode(&v)
		return v.SendKeysFrame, err
	},
	FrameSignalAck: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			SignalAckFrame
		}
		err := d.Decode(&v)
		return v.SignalAckFrame, err
	},
	FrameAttachOpen: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			AttachOpenFrame
		}
		err := d.Decode(&v)
		return v.AttachOpenFrame, err
	},
	FrameAttachInput: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			AttachInputFrame
		}
		err := d.Decode(&v)
		return v.AttachInputFrame, err
	},
	FrameAttachResize: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			AttachResizeFrame
		}
		err := d.Decode(&v)
		return v.AttachResizeFrame, err
	},
	FrameAttachClose: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			AttachCloseFrame
		}
		err := d.Decode(&v)
		return v.AttachCloseFrame, err
	},
	FrameLogRequest: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			LogRequestFrame
		}
		err := d.Decode(&v)
		return v.LogRequestFrame, err
	},
	FrameError: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			ErrorFrame
		}
		err := d.Decode(&v)
		return v.ErrorFrame, err
	},
	FramePaneWatch: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			PaneWatchFrame
		}
		err := d.Decode(&v)
		return v.PaneWatchFrame, err
	},
	FrameWorkspaceRequest: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			WorkspaceRequestFrame
		}
		err := d.Decode(&v)
		return v.WorkspaceRequestFrame, err
	},
	FrameHeartbeat: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			HeartbeatFrame
		}
		err := d.Decode(&v)
		return v.HeartbeatFrame, err
	},
	FrameRunDispatchAck: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			RunDispatchAckFrame
		}
		err := d.Decode(&v)
		return v.RunDispatchAckFrame, err
	},
	FrameSnapshot: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			SnapshotFrame
		}
		err := d.Decode(&v)
		return v.SnapshotFrame, err
	},
	FrameSignal: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			SignalFrame
		}
		err := d.Decode(&v)
		return v.SignalFrame, err
	},
	FrameLogChunk: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			LogChunkFrame
		}
		err := d.Decode(&v)
		return v.LogChunkFrame, err
	},
	FrameRunState: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			RunStateFrame
		}
		err := d.Decode(&v)
		return v.RunStateFrame, err
	},
	FrameAttachOutput: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			AttachOutputFrame
		}
		err := d.Decode(&v)
		return v.AttachOutputFrame, err
	},
	FrameAttachClosed: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			AttachClosedFrame
		}
		err := d.Decode(&v)
		return v.AttachClosedFrame, err
	},
	FrameScreen: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			ScreenFrame
		}
		err := d.Decode(&v)
		return v.ScreenFrame, err
	},
	FrameWorkspaceReply: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			WorkspaceReplyFrame
		}
		err := d.Decode(&v)
		return v.WorkspaceReplyFrame, err
	},
	FrameWorkspaceReady: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			WorkspaceReadyFrame
		}
		err := d.Decode(&v)
		return v.WorkspaceReadyFrame, err
	},
	FrameWorkspaceRemoved: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			WorkspaceRemovedFrame
		}
		err := d.Decode(&v)
		return v.WorkspaceRemovedFrame, err
	},
	FrameWorkspacePushed: func(d *json.Decoder) (Frame, error) {
		var v struct {
			typeKey
			WorkspacePushedFrame
		}
		err := d.Decode(&v)
		return v.WorkspacePushedFrame, err
	},
}

// typeKey takes a frame's "type" while its struct takes the rest.
type typeKey struct {
	Type string `json:"type"`
}

// withType encodes v, a frame's fields, with "type" first.
func withType(typ string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	head := `{"type":` + fmt.Sprintf("%q", typ)
	if len(b) <= 2 { // {}
		return []byte(head + "}"), nil
	}
	out := make([]byte, 0, len(head)+len(b))
	out = append(out, head...)
	out = append(out, ',')
	return append(out, b[1:]...), nil
}

// DecodeFrame parses one frame, refusing oversized input, input that is
// not one JSON object of a known type, and values of the wrong JSON type:
// those return a nil frame, answered as malformed. A frame of a known
// type is decoded into its struct with unknown fields refused. A field of
// another frame type (a capture on a run_state) returns the frame with a
// *Error naming the field, so that the receiver answers it as it answers
// a frame Validate refuses (a refused signal gets its signal_ack); a
// field no frame type has is malformed. It checks the shape only:
// Validate checks the contents.
func DecodeFrame(b []byte) (Frame, error) {
	if len(b) > MaxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", len(b), MaxFrame)
	}
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, err
	}
	if head.Type == nil || *head.Type == "" {
		return nil, fmt.Errorf("frame without a type")
	}
	typ := *head.Type
	decode, ok := frameDecoders[typ]
	if !ok {
		return nil, fmt.Errorf("unknown frame type %s", quote(typ))
	}
	f, err := decodeOne(decode, b, true)
	if err != nil {
		name, unknown := strings.CutPrefix(err.Error(), "json: unknown field ")
		name, _ = strconv.Unquote(name)
		if !unknown || !frameFieldNames[name] {
			return nil, err
		}
		// A field of another type: the frame is answered as refused,
		// unless it is malformed besides.
		if f, err = decodeOne(decode, b, false); err != nil {
			return nil, err
		}
		if err := checkForeignFields(f, b); err != nil {
			return nil, err
		}
		return f, framed(typ, Invalid(name, "%s is not a field of this frame", name))
	}
	return f, nil
}

// decodeOne decodes exactly one JSON value with decode, refusing unknown
// fields when strict.
func decodeOne(decode func(*json.Decoder) (Frame, error), b []byte, strict bool) (Frame, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	f, err := decode(dec)
	if err != nil {
		return f, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return f, errors.New("trailing data after the JSON value")
	}
	if s, ok := f.(SignalFrame); ok && string(s.Payload) == "null" {
		s.Payload = nil // an empty payload, as a carried field spells it
		f = s
	}
	return f, nil
}

// frameFieldTypes are the JSON names of every field of every frame type,
// with their Go types, read from the structs themselves; frameFieldNames
// is the same as a set.
var frameFieldTypes = func() map[string]reflect.Type {
	types := map[string]reflect.Type{}
	for _, decode := range frameDecoders {
		f, _ := decode(json.NewDecoder(strings.NewReader("{}")))
		for name, t := range jsonFields(reflect.TypeOf(f)) {
			types[name] = t
		}
	}
	return types
}()

var frameFieldNames = func() map[string]bool {
	names := map[string]bool{}
	for name := range frameFieldTypes {
		names[name] = true
	}
	return names
}()

// jsonFields maps the JSON names of a frame struct's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = t.Field(i).Type
	}
	return out
}

// checkForeignFields holds the fields of b that f's type does not carry
// to the JSON type they have in the frame types that do: a value no
// frame could hold is malformed, whichever frame it came in.
func checkForeignFields(f Frame, b []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	own := jsonFields(reflect.TypeOf(f))
	for key, raw := range all {
		if strings.EqualFold(key, "type") || hasFold(own, key) {
			continue
		}
		name := strings.ToLower(key)
		t, ok := frameFieldTypes[name]
		if !ok {
			return fmt.Errorf("json: unknown field %q", key)
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			return err
		}
	}
	return nil
}

func hasFold(m map[string]reflect.Type, key string) bool {
	for name := range m {
		if strings.EqualFold(name, key) {
			return true
		}
	}
	return false
}
