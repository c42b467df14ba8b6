package wire

import (
	"strings"
	"testing"
)

// TestRequestsValidate: each request body names the field it refuses,
// and a good one passes.
func TestRequestsValidate(t *testing.T) {
	s := func(v string) *string { return &v }
	n := func(v int) *int { return &v }
	uuid := "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f"
	for _, c := range []struct {
		name  string
		req   interface{ Validate() error }
		field string // "" for valid
	}{
		{"run ok", CreateRun{TaskID: uuid, Provider: "shell", Cwd: s("/tmp"), Prompt: s("hi"), Args: []string{"-x"}}, ""},
		{"run task", CreateRun{TaskID: "x", Provider: "shell"}, "task_id"},
		{"run provider", CreateRun{TaskID: uuid, Provider: "Shell"}, "provider"},
		{"run cwd", CreateRun{TaskID: uuid, Provider: "shell", Cwd: s("rel")}, "cwd"},
		{"run prompt NUL", CreateRun{TaskID: uuid, Provider: "shell", Prompt: s("a\x00")}, "prompt"},
		{"run prompt size", CreateRun{TaskID: uuid, Provider: "shell", Prompt: s(strings.Repeat("a", MaxPrompt+1))}, "prompt"},
		{"run args", CreateRun{TaskID: uuid, Provider: "shell", Args: make([]string, 65)}, "args"},
		{"run attempts", CreateRun{TaskID: uuid, Provider: "shell", MaxAttempts: n(21)}, "max_attempts"},
		{"run workspace", CreateRun{TaskID: uuid, Provider: "shell", Workspace: s("copy")}, "workspace"},
		{"continue ok", ContinueRun{}, ""},
		{"continue text", ContinueRun{Text: s("")}, "text"},
		{"continue provider", ContinueRun{Provider: s("-x")}, "provider"},
		{"item ok", CreateWorkItem{Kind: "task", Title: "t"}, ""},
		{"item kind", CreateWorkItem{Kind: "story", Title: "t"}, "kind"},
		{"item title", CreateWorkItem{Kind: "task", Title: " "}, "title"},
		{"item body", CreateWorkItem{Kind: "task", Title: "t", Body: s("\x00")}, "body"},
		{"item status", CreateWorkItem{Kind: "task", Title: "t", Status: s("open")}, "status"},
		{"update position", UpdateWorkItem{Position: n(-1)}, "position"},
		{"update parent", UpdateWorkItem{ParentID: Optional{Set: true, Value: s("x")}}, "parent_id"},
		{"project ok", CreateProject{Name: "p", Slug: s("p-1")}, ""},
		{"project slug", CreateProject{Name: "p", Slug: s("P")}, "slug"},
		{"project description", UpdateProject{Description: s(strings.Repeat("a", MaxDescription+1))}, "description"},
		{"channel url", CreateChannel{Name: "c", Kind: ChannelWebhook, URL: "ftp://x", Events: []string{"run.*"}}, "url"},
		{"channel events", CreateChannel{Name: "c", Kind: ChannelWebhook, URL: "https://x", Events: []string{""}}, "events"},
		{"token name", CreateToken{Name: " a", Role: "viewer"}, "name"},
		{"token role", CreateToken{Name: "a", Role: "root"}, "role"},
		{"host name", CreateHost{Name: "-h"}, "name"},
		{"host max_runs", CreateHost{Name: "h", MaxRuns: n(1001)}, "max_runs"},
		{"host update", UpdateHost{}, "max_runs"},
		{"register ok", Register{InstanceID: uuid, Providers: []string{"shell"}}, ""},
		{"register instance", Register{InstanceID: "i"}, "instance_id"},
		{"register resumable", Register{InstanceID: uuid, Resumable: []string{"A"}}, "resumable"},
		{"register continue", Register{InstanceID: uuid, ContinueMessages: map[string]string{"shell": ""}}, "continue_messages"},
		{"signal attempt", Signal{Kind: SignalStarted, Attempt: n(0), Source: SourceWrapper}, "attempt"},
		{"signal source", Signal{Kind: SignalStarted, Attempt: n(1), Source: SourceManual}, "source"},
		{"agent parent", AgentCreateWorkItem{Title: "t", ParentID: Optional{Set: true, Value: s("x")}}, "parent_id"},
		{"agent kind", AgentCreateWorkItem{Title: "t", Kind: s("story")}, "kind"},
		{"agent status", AgentUpdateWorkItem{Status: s("open")}, "status"},
		{"agent progress", AgentProgress{Text: " "}, "text"},
	} {
		err := c.req.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		e, ok := AsError(err)
		if !ok || e.Code != CodeValidationFailed || e.Details["field"] != c.field {
			t.Errorf("%s: %v, want a validation_failed on %s", c.name, err, c.field)
		}
	}
}
