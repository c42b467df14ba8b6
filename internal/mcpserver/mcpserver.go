// Package mcpserver is `pam mcp` (docs/architecture.md#pams-tools-for-the-agent):
// pam's own tools for the agent, an MCP server on stdio that an agent CLI
// starts inside a run. Each tool is one call of the internal routes of
// docs/api.md#pams-tools-for-the-agent, made with the run's signal
// token, so the server can do exactly what the run may: read and change
// its project's work items, and report its progress. A refusal, bad
// arguments or an unreachable orchestrator are tool errors the agent
// reads (isError), never the end of the server.
package mcpserver

import (
	"context"
	"io"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// DefaultCallTimeout bounds one call to the orchestrator: an agent waits
// for its tool, so an orchestrator that does not answer is an error it
// reads, not a hang.
const DefaultCallTimeout = 30 * time.Second

// Options configure the server of one run.
type Options struct {
	Run Run
	// Client calls the orchestrator; its Token is Run.Token.
	Client *apiclient.Client
	// Version is pam's, reported at initialization.
	Version string
	// CallTimeout bounds each call to the orchestrator (0:
	// DefaultCallTimeout).
	CallTimeout time.Duration
}

// instructions tell the agent what the server is for.
const instructions = "pam (project-agent-manager) runs you as one run of a work item of its project plan. " +
	"These tools read and change that project's work items (milestones > epics > tasks > subtasks, each todo, doing, done or cancelled), " +
	"the plan the people running you review, and tell pam what you are doing. " +
	"Record follow-up work you find with create_work_item, mark work you finish with update_work_item, " +
	"and say what you are doing at milestones of your work with report_progress. They reach only this run's project, " +
	"and only while the run is live."

// New returns pam's MCP server for o.Run, registered as wire.MCPServerName.
func New(o Options) *mcp.Server {
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	s := mcp.NewServer(&mcp.Implementation{Name: wire.MCPServerName, Title: "pam", Version: o.Version},
		&mcp.ServerOptions{Instructions: instructions})
	t := &tools{o: o}
	no := false
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	writes := &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no}
	mcp.AddTool(s, &mcp.Tool{
		Name: wire.ToolListWorkItems,
		Description: "List the work items of this run's project in tree order: each item comes before its children, " +
			"siblings by position. Each has id, parent_id, kind, title, body, status and path (the ids from the top level down).",
		InputSchema: object(nil, map[string]*jsonschema.Schema{
			"status": enum("Only the items of this status; omit it for every item.", itemStatuses...),
		}),
		Annotations: readOnly,
	}, t.list)
	mcp.AddTool(s, &mcp.Tool{
		Name:        wire.ToolGetWorkItem,
		Description: "Read one work item of this run's project.",
		InputSchema: object([]string{"id"}, map[string]*jsonschema.Schema{
			"id": str("The work item's id, as list_work_items shows it."),
		}),
		Annotations: readOnly,
	}, t.get)
	mcp.AddTool(s, &mcp.Tool{
		Name: wire.ToolCreateWorkItem,
		Description: "Add a work item to this run's project, as todo: follow-up work, a bug you found, a part of your task. " +
			"By default it is a sibling of your own work item: of its kind, under its parent.",
		InputSchema: object([]string{"title"}, map[string]*jsonschema.Schema{
			"title": {Type: "string", MinLength: jsonschema.Ptr(1), MaxLength: jsonschema.Ptr(200),
				Description: "What is to be done, in one line of at most 200 characters."},
			"kind": enum("milestone, epic, task or subtask; a parent must rank strictly above its child "+
				"(milestone > epic > task > subtask). Default: the kind of your own work item.", itemKinds...),
			"body": str("Details, in Markdown, at most 64 KiB."),
			"parent_id": str("The id of the parent work item. Omit it to put the item under the parent of your own work item; " +
				`give "root" to put it at the top level of the project.`),
		}),
		Annotations: writes,
	}, t.create)
	mcp.AddTool(s, &mcp.Tool{
		Name:        wire.ToolUpdateWorkItem,
		Description: "Change the title, body or status of a work item of this run's project; give at least one of them.",
		InputSchema: object([]string{"id"}, map[string]*jsonschema.Schema{
			"id":     str("The work item's id, as list_work_items shows it."),
			"title":  {Type: "string", MinLength: jsonschema.Ptr(1), MaxLength: jsonschema.Ptr(200), Description: "The new title: one line of at most 200 characters."},
			"body":   str("The new body, in Markdown, at most 64 KiB; it replaces the old one."),
			"status": enum("The new status.", itemStatuses...),
		}),
		Annotations: writes,
	}, t.update)
	mcp.AddTool(s, &mcp.Tool{
		Name: wire.ToolReportProgress,
		Description: "Tell pam, and the people watching this run, what you are doing or have just done, in a sentence or two. " +
			"It is kept in the run's history.",
		InputSchema: object([]string{"text"}, map[string]*jsonschema.Schema{
			"text": {Type: "string", MinLength: jsonschema.Ptr(1), MaxLength: jsonschema.Ptr(wire.MaxProgressText),
				Description: "The progress report, at most 4 KiB."},
		}),
		Annotations: writes,
	}, t.progress)
	return s
}

// Serve runs the server of o over in and out (newline-delimited JSON-RPC,
// MCP's stdio transport) until the client closes in or ctx ends.
func Serve(ctx context.Context, o Options, in io.Reader, out io.Writer) error {
	err := New(o).Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopCloser{out}})
	if ctx.Err() != nil {
		return nil // asked to end
	}
	return err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

var (
	itemStatuses = []string{"todo", "doing", "done", "cancelled"}
	itemKinds    = []string{"milestone", "epic", "task", "subtask"}
)

// object is the schema of a tool's arguments: these properties, no
// other, the required ones named.
func object(required []string, props map[string]*jsonschema.Schema) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: props, Required: required, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
}

func str(description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: description}
}

func enum(description string, values ...string) *jsonschema.Schema {
	s := str(description)
	for _, v := range values {
		s.Enum = append(s.Enum, v)
	}
	return s
}
