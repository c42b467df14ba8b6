package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"pam/internal/wire"
)

// The tools' arguments, as the SDK decodes them once they passed the
// schemas of New.

type listArgs struct {
	Status string `json:"status,omitempty"`
}

type idArgs struct {
	ID string `json:"id"`
}

type createArgs struct {
	Title    string  `json:"title"`
	Kind     *string `json:"kind,omitempty"`
	Body     *string `json:"body,omitempty"`
	ParentID *string `json:"parent_id,omitempty"`
}

type updateArgs struct {
	ID     string  `json:"id"`
	Title  *string `json:"title,omitempty"`
	Body   *string `json:"body,omitempty"`
	Status *string `json:"status,omitempty"`
}

type progressArgs struct {
	Text string `json:"text"`
}

// rootParent is the parent_id that asks for the project's top level (the
// route's null: a plain string is what every CLI's schema dialect takes).
const rootParent = "root"

// createBody turns create_work_item's arguments into the route's body.
func createBody(a createArgs) (wire.AgentCreateWorkItem, error) {
	b := wire.AgentCreateWorkItem{Title: a.Title, Kind: a.Kind, Body: a.Body}
	if a.ParentID != nil {
		switch p := strings.TrimSpace(*a.ParentID); p {
		case "":
			return b, fmt.Errorf(`invalid parent_id: it is empty; omit it to put the item under the parent of your own work item, or give "root" for the project's top level`)
		case rootParent:
			b.ParentID = wire.Optional{Set: true}
		default:
			b.ParentID = wire.Optional{Set: true, Value: &p}
		}
	}
	return b, nil
}

// updateBody turns update_work_item's arguments into the route's body.
func updateBody(a updateArgs) (wire.AgentUpdateWorkItem, error) {
	if a.Title == nil && a.Body == nil && a.Status == nil {
		return wire.AgentUpdateWorkItem{}, errors.New("nothing to change: give at least one of title, body and status")
	}
	return wire.AgentUpdateWorkItem{Title: a.Title, Body: a.Body, Status: a.Status}, nil
}

// tools are the handlers of New's tools.
type tools struct{ o Options }

// call runs f against the orchestrator within the call timeout, and
// turns its failure into what the agent reads.
func (t *tools) call(ctx context.Context, item string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, t.o.CallTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		return t.explain(err, item)
	}
	return nil
}

// explain says why a call failed in words an agent can act on: what pam
// refused and why, or that pam could not be reached (and, for a change,
// that it may or may not have been made).
func (t *tools) explain(err error, item string) error {
	e, ok := wire.AsError(err)
	if !ok {
		return fmt.Errorf("pam's orchestrator at %s could not be reached (%v); try again in a moment "+
			"(a change may or may not have been made: list_work_items tells)", t.o.Run.APIURL, err)
	}
	switch e.Code {
	case wire.CodeNotFound:
		if item != "" {
			return fmt.Errorf("no work item %s in this run's project", item)
		}
	case wire.CodeValidationFailed:
		if f, _ := e.Details["field"].(string); f != "" {
			return fmt.Errorf("invalid %s: %s", f, e.Message)
		}
	case wire.CodeIllegalTransition:
		return fmt.Errorf("this pam run is no longer live (%s); pam's tools work only while it runs", e.Message)
	case wire.CodeUnauthorized:
		return fmt.Errorf("pam refused this run's credentials (%s); pam's tools work only for the live attempt of the run", e.Message)
	}
	return fmt.Errorf("pam refused the call: %s (%s)", e.Message, e.Code)
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, a listArgs) (*mcp.CallToolResult, wire.WorkItemList, error) {
	var out wire.WorkItemList
	err := t.call(ctx, "", func(ctx context.Context) (err error) {
		out.WorkItems, err = t.o.Client.AgentWorkItems(ctx, t.o.Run.ID, a.Status)
		return err
	})
	return nil, out, err
}

func (t *tools) get(ctx context.Context, _ *mcp.CallToolRequest, a idArgs) (*mcp.CallToolResult, *wire.WorkItem, error) {
	var out *wire.WorkItem
	err := t.call(ctx, a.ID, func(ctx context.Context) (err error) {
		out, err = t.o.Client.AgentWorkItem(ctx, t.o.Run.ID, a.ID)
		return err
	})
	return nil, out, err
}

func (t *tools) create(ctx context.Context, _ *mcp.CallToolRequest, a createArgs) (*mcp.CallToolResult, *wire.WorkItem, error) {
	body, err := createBody(a)
	if err != nil {
		return nil, nil, err
	}
	var out *wire.WorkItem
	err = t.call(ctx, "", func(ctx context.Context) (err error) {
		out, err = t.o.Client.AgentCreateWorkItem(ctx, t.o.Run.ID, body)
		return err
	})
	return nil, out, err
}

func (t *tools) update(ctx context.Context, _ *mcp.CallToolRequest, a updateArgs) (*mcp.CallToolResult, *wire.WorkItem, error) {
	body, err := updateBody(a)
	if err != nil {
		return nil, nil, err
	}
	var out *wire.WorkItem
	err = t.call(ctx, a.ID, func(ctx context.Context) (err error) {
		out, err = t.o.Client.AgentUpdateWorkItem(ctx, t.o.Run.ID, a.ID, body)
		return err
	})
	return nil, out, err
}

func (t *tools) progress(ctx context.Context, _ *mcp.CallToolRequest, a progressArgs) (*mcp.CallToolResult, any, error) {
	if err := t.call(ctx, "", func(ctx context.Context) error {
		return t.o.Client.AgentProgress(ctx, t.o.Run.ID, a.Text)
	}); err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Progress reported to pam."}}}, nil, nil
}
