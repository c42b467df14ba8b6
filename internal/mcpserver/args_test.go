package mcpserver

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pam/internal/wire"
)

func ptr(s string) *string { return &s }

// TestCreateBody: create_work_item's parent_id is decoded by hand ("root"
// is the route's null); everything else passes through.
func TestCreateBody(t *testing.T) {
	id := "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f"
	for _, c := range []struct {
		name string
		in   createArgs
		want string // the route's JSON body, or "error: <part of it>"
	}{
		{"title alone: the default parent", createArgs{Title: "T"}, `{"title":"T"}`},
		{"kind and body pass", createArgs{Title: "T", Kind: ptr("epic"), Body: ptr("b")}, `{"title":"T","kind":"epic","body":"b"}`},
		{"root is the top level", createArgs{Title: "T", ParentID: ptr("root")}, `{"title":"T","parent_id":null}`},
		{"root with spaces", createArgs{Title: "T", ParentID: ptr(" root ")}, `{"title":"T","parent_id":null}`},
		{"an id", createArgs{Title: "T", ParentID: ptr(id)}, `{"title":"T","parent_id":"` + id + `"}`},
		{"an id with spaces", createArgs{Title: "T", ParentID: ptr(" " + id + "\n")}, `{"title":"T","parent_id":"` + id + `"}`},
		{"anything else goes to the server", createArgs{Title: "T", ParentID: ptr("Root")}, `{"title":"T","parent_id":"Root"}`},
		{"empty", createArgs{Title: "T", ParentID: ptr("")}, `error: "root"`},
		{"blank", createArgs{Title: "T", ParentID: ptr("  ")}, `error: omit it`},
	} {
		b, err := createBody(c.in)
		got := ""
		if err != nil {
			got = "error: " + err.Error()
		} else {
			j, _ := json.Marshal(b)
			got = string(j)
		}
		if strings.HasPrefix(c.want, "error: ") {
			if err == nil || !strings.Contains(got, strings.TrimPrefix(c.want, "error: ")) {
				t.Errorf("%s: %s, want an error with %q", c.name, got, strings.TrimPrefix(c.want, "error: "))
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// FuzzCreateBody: whatever the arguments, createBody either refuses them
// or gives a body that names the same title, kind and body, and a parent
// that is absent, null (root) or the trimmed id.
func FuzzCreateBody(f *testing.F) {
	for _, s := range []string{"", "root", " root", "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", "\x00", "null"} {
		f.Add("T", s, true)
	}
	f.Add("T", "", false)
	f.Fuzz(func(t *testing.T, title, parent string, hasParent bool) {
		a := createArgs{Title: title}
		if hasParent {
			a.ParentID = &parent
		}
		b, err := createBody(a)
		if err != nil {
			if !hasParent || strings.TrimSpace(parent) != "" {
				t.Fatalf("refused %+v: %v", a, err)
			}
			return
		}
		if b.Title != title || b.ParentID.Set != hasParent {
			t.Fatalf("%+v → %+v", a, b)
		}
		if hasParent {
			p := strings.TrimSpace(parent)
			if (p == rootParent) != (b.ParentID.Value == nil) || (b.ParentID.Value != nil && *b.ParentID.Value != p) {
				t.Fatalf("parent %q → %v", parent, b.ParentID.Value)
			}
		}
	})
}

func TestUpdateBody(t *testing.T) {
	if _, err := updateBody(updateArgs{ID: "x"}); err == nil || !strings.Contains(err.Error(), "at least one of title, body and status") {
		t.Errorf("nothing to change: %v", err)
	}
	b, err := updateBody(updateArgs{ID: "x", Status: ptr("done")})
	if err != nil || b.Status == nil || *b.Status != "done" || b.Title != nil || b.Body != nil {
		t.Errorf("status only: %+v %v", b, err)
	}
}

// TestRunFromEnv: the run comes from the variables pam exec run sets;
// outside a run, or with any of them wrong, pam mcp says which; a CLI
// that withheld PAM_SIGNAL_TOKEN leaves it to the run's dispatch file.
func TestRunFromEnv(t *testing.T) {
	const id = "0d9e5a1c-3b7e-4a53-9d8f-2a5b8c9d0e1f"
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "dispatch"), 0o700); err != nil {
		t.Fatal(err)
	}
	d, _ := json.Marshal(wire.Dispatch{RunID: id, Attempt: 2, APIURL: "http://127.0.0.1:7898", SignalToken: "from-the-file", CAFile: "/etc/pam/ca.pem"})
	if err := os.WriteFile(filepath.Join(dir, "dispatch", id+".json"), d, 0o600); err != nil {
		t.Fatal(err)
	}
	run := map[string]string{"PAM_RUN_ID": id, "PAM_ATTEMPT": "2", "PAM_API_URL": "http://127.0.0.1:7898", "PAM_SIGNAL_TOKEN": "tok"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range run {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want Run    // when no error
		err  string // part of the error
	}{
		{"outside a run", map[string]string{"HOME": "/root"}, Run{}, "not inside a pam run"},
		{"a run", run, Run{ID: id, Attempt: 2, APIURL: "http://127.0.0.1:7898", Token: "tok"}, ""},
		{"with a CA", with("PAM_CA_FILE", "/ca.pem"), Run{ID: id, Attempt: 2, APIURL: "http://127.0.0.1:7898", Token: "tok", CAFile: "/ca.pem"}, ""},
		{"no run id", with("PAM_RUN_ID", ""), Run{}, "PAM_RUN_ID"},
		{"run id not a uuid", with("PAM_RUN_ID", "pam-0d9e5a1c"), Run{}, "PAM_RUN_ID"},
		{"attempt 0", with("PAM_ATTEMPT", "0"), Run{}, "PAM_ATTEMPT"},
		{"attempt not a number", with("PAM_ATTEMPT", "two"), Run{}, "PAM_ATTEMPT"},
		{"url not http", with("PAM_API_URL", "ftp://x"), Run{}, "PAM_API_URL"},
		{"token withheld, no data dir", with("PAM_SIGNAL_TOKEN", ""), Run{}, "PAM_WORKER_DATA_DIR"},
		{"token withheld: the dispatch file's", with("PAM_SIGNAL_TOKEN", "", "PAM_WORKER_DATA_DIR", dir),
			Run{ID: id, Attempt: 2, APIURL: "http://127.0.0.1:7898", Token: "from-the-file", CAFile: "/etc/pam/ca.pem"}, ""},
		{"token withheld, another attempt's file", with("PAM_SIGNAL_TOKEN", "", "PAM_WORKER_DATA_DIR", dir, "PAM_ATTEMPT", "3"), Run{}, "attempt 2, not 3"},
		{"token withheld, no file", with("PAM_SIGNAL_TOKEN", "", "PAM_WORKER_DATA_DIR", t.TempDir()), Run{}, "dispatch file"},
	} {
		got, err := RunFromEnv(func(k string) string { return c.env[k] })
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v, %v; want an error with %q", c.name, got, err, c.err)
			}
			if c.err == "not inside a pam run" && !errors.Is(err, ErrNotInRun) {
				t.Errorf("%s: %v is not ErrNotInRun", c.name, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// TestExplain: what the agent reads when pam refuses a call or cannot be
// reached.
func TestExplain(t *testing.T) {
	tl := &tools{o: Options{Run: Run{APIURL: "http://10.0.0.1:7898"}}}
	for _, c := range []struct {
		err  error
		item string
		want string
	}{
		{wire.NotFound("work item"), "abc", "no work item abc in this run's project"},
		{wire.Invalid("kind", "kind must be one of milestone, epic, task, subtask"), "", "invalid kind: kind must be one of"},
		{wire.Conflict(wire.CodeIllegalTransition, "run x is exited: pam's tools work only while the run is live"), "", "no longer live"},
		{wire.Errorf(wire.CodeUnauthorized, "this signal token is for attempt 1; the run is at attempt 2"), "", "live attempt"},
		{wire.Errorf(wire.CodeRateLimited, "this run made 100 calls of pam's tools within the last minute, the most it may; try again in 12 s"), "", "try again in 12 s"},
		{&url.Error{Op: "Get", URL: "http://10.0.0.1:7898/api", Err: errors.New("connection refused")}, "", "could not be reached"},
	} {
		if got := tl.explain(c.err, c.item).Error(); !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q in it", c.err, got, c.want)
		}
	}
}
