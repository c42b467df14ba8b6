package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeTermFrame(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{`{"type":"input","bytes":"aGk="}`, true},
		{`{"type":"resize","rows":24,"cols":80}`, true},
		{`{"type":"release_lease"}`, true},
		{`{"type":"resize","rows":0,"cols":80}`, false},
		{`{"type":"resize","rows":24,"cols":1001}`, false},
		{`{"type":"input","bytes":"!!"}`, false},
		{`{"type":"input","extra":1}`, false},
		{`{"type":"lease_acquired"}`, false}, // a server frame
		{`{}`, false},
		{`[]`, false},
		{`{"type":"input"} {}`, false},
		{`{"type":"input","bytes":"` + strings.Repeat("A", MaxFrame) + `"}`, false},
	} {
		_, err := DecodeTermFrame([]byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("DecodeTermFrame(%.60q) = %v, want ok %v", c.in, err, c.ok)
		}
	}
}

// Whatever a client sends, decoding never panics, and what it accepts is
// a client frame type within bounds that encodes back.
func FuzzDecodeTermFrame(f *testing.F) {
	for _, s := range []string{`{"type":"input","bytes":"aGk="}`, `{"type":"resize","rows":24,"cols":80}`, `{"type":"release_lease"}`, `{"type":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeTermFrame(b)
		if err != nil {
			return
		}
		switch fr.Type {
		case WSInput, WSReleaseLease:
		case WSResize:
			if !ValidTermSize(fr.Rows, fr.Cols) {
				t.Fatalf("accepted resize %dx%d", fr.Rows, fr.Cols)
			}
		default:
			t.Fatalf("accepted type %q", fr.Type)
		}
		if _, err := json.Marshal(fr); err != nil {
			t.Fatal(err)
		}
	})
}
