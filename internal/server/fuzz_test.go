package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"pam/internal/server"
	"pam/internal/wire"
)

// FuzzWorkItemJSON feeds hostile bodies to the strict decoder of the
// work-item routes. Whatever the input: no panic; a failure is a 400 or
// 413 wire error with a contract code (validation_failed names a field);
// a success survives an encode/decode round trip unchanged.
func FuzzWorkItemJSON(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"task","title":"t"}`,
		`{"kind":"subtask","title":"s","body":"b","parent_id":"6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f","status":"doing"}`,
		`{"title":"x","parent_id":null}`,
		`{"position":3,"status":"done"}`,
		`{"parent_id":"not-a-uuid"}`,
		`{"kind":"task","title":"t","extra":1}`,
		`{"title":5}`,
		`{"title":"a"} trailing`,
		`[]`, `null`, `""`, `{`, `{"title":"\u0000"}`,
		`{"position":1e400}`, `{"position":-1}`, `{"title":"` + strings.Repeat("é", 300) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var create wire.CreateWorkItem
		checkDecode(t, body, &create)
		var update wire.UpdateWorkItem
		checkDecode(t, body, &update)
	})
}

func checkDecode[T any](t *testing.T, body []byte, v *T) {
	err := server.DecodeStrict(bytes.NewReader(body), v)
	if err != nil {
		e, ok := wire.AsError(err)
		if !ok {
			t.Fatalf("decode error is not a wire error: %v", err)
		}
		switch {
		case server.StatusOf(e) == http.StatusBadRequest && e.Code == wire.CodeMalformedJSON:
		case server.StatusOf(e) == http.StatusBadRequest && e.Code == wire.CodeValidationFailed:
			if f, _ := e.Details["field"].(string); f == "" {
				t.Fatalf("validation_failed without a field: %+v", e)
			}
		case server.StatusOf(e) == http.StatusRequestEntityTooLarge && e.Code == wire.CodeBodyTooLarge:
		default:
			t.Fatalf("unexpected error %d %s", server.StatusOf(e), e.Code)
		}
		return
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	var back T
	if err := server.DecodeStrict(bytes.NewReader(again), &back); err != nil {
		t.Fatalf("round trip of %s: %v", again, err)
	}
	if !reflect.DeepEqual(*v, back) {
		t.Fatalf("round trip changed the value: %+v vs %+v", *v, back)
	}
}
