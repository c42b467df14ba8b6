package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// object is a JSON object whose members keep their order and their text:
// a file rewritten through it differs from the original only where a
// member was set (and in white space, re-indented as the CLIs write it).
type object struct {
	keys []string
	vals map[string]json.RawMessage
}

// parseObject reads a JSON object; empty input (or only white space) is
// an empty object. A repeated key keeps its first place and its last
// value, as JSON.parse does.
func parseObject(data []byte) (*object, error) {
	o := &object{vals: map[string]json.RawMessage{}}
	if len(bytes.TrimSpace(data)) == 0 {
		return o, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		key := tok.(string) // inside an object, a key is always a string
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		if _, seen := o.vals[key]; !seen {
			o.keys = append(o.keys, key)
		}
		o.vals[key] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not valid JSON: data after the object")
	}
	return o, nil
}

// get returns the member key.
func (o *object) get(key string) (json.RawMessage, bool) {
	v, ok := o.vals[key]
	return v, ok
}

// set puts a member, in place when it exists, else last.
func (o *object) set(key string, v json.RawMessage) {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

// child returns the member key as an object (empty when absent); a
// member that is not an object is an error naming it.
func (o *object) child(key, what string) (*object, error) {
	raw, ok := o.get(key)
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return parseObject(nil)
	}
	c, err := parseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return c, nil
}

// raw encodes the object compactly, members in order.
func (o *object) raw() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// file encodes the object as the CLIs write their files: two-space
// indentation and a final newline.
func (o *object) file() ([]byte, error) {
	var b bytes.Buffer
	if err := json.Indent(&b, o.raw(), "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// editClaude sets projects[<dir>].hasTrustDialogAccepted = true in Claude
// Code's ~/.claude.json for each of dirs.
func editClaude(data []byte, dirs []string) ([]byte, bool, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, false, err
	}
	projects, err := top.child("projects", "projects")
	if err != nil {
		return nil, false, err
	}
	changed := false
	for _, dir := range dirs {
		entry, err := projects.child(dir, fmt.Sprintf("projects[%q]", dir))
		if err != nil {
			return nil, false, err
		}
		if v, ok := entry.get("hasTrustDialogAccepted"); ok && string(bytes.TrimSpace(v)) == "true" {
			continue
		}
		entry.set("hasTrustDialogAccepted", json.RawMessage("true"))
		projects.set(dir, entry.raw())
		changed = true
	}
	if !changed {
		return nil, false, nil
	}
	top.set("projects", projects.raw())
	out, err := top.file()
	return out, err == nil, err
}

// geminiTrusted is gemini-cli's trust level for a folder trusted by
// itself (not through its parent).
const geminiTrusted = `"TRUST_FOLDER"`

// editGemini sets "<dir>": "TRUST_FOLDER" in gemini-cli's
// trustedFolders.json for each of dirs.
func editGemini(data []byte, dirs []string) ([]byte, bool, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, false, err
	}
	changed := false
	for _, dir := range dirs {
		if v, ok := top.get(dir); ok && string(bytes.TrimSpace(v)) == geminiTrusted {
			continue
		}
		top.set(dir, json.RawMessage(geminiTrusted))
		changed = true
	}
	if !changed {
		return nil, false, nil
	}
	out, err := top.file()
	return out, err == nil, err
}
