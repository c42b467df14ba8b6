package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

var itemCmd = &command{
	name:    "item",
	summary: "add, list, show, move, update and delete work items",
	subs: []*command{
		{
			name: "add", args: "PROJECT", nargs: 1, names: projectIDs, summary: "add a work item to a project", group: "item",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				kind := fs.String("kind", "", "milestone, epic, task or subtask (required)")
				title := fs.String("title", "", "title (required)")
				body := fs.String("body", "", "body text")
				parent := fs.String("parent", "", "id or id prefix of the parent item (default: the project root)")
				status := fs.String("status", "", "todo, doing, done or cancelled (default todo)")
				asJSON := fs.Bool("json", false, "print the created item as JSON")
				return func(x *invocation) error {
					if *kind == "" || *title == "" {
						return usagef("--kind and --title are required")
					}
					req := wire.CreateWorkItem{Kind: *kind, Title: *title}
					given := givenFlags(fs)
					if given["body"] {
						req.Body = body
					}
					if given["status"] {
						req.Status = status
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					if given["parent"] {
						id, err := x.id(c, itemIDs, *parent)
						if err != nil {
							return err
						}
						req.ParentID = &id
					}
					w, err := c.CreateWorkItem(x.ctx, x.args[0], req)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, w)
					}
					fmt.Fprintf(x.stdout, "added %s %s\n", w.Kind, w.ID)
					return nil
				}
			},
		},
		{
			name: "list", args: "PROJECT", nargs: 1, names: projectIDs, summary: "list a project's work items (--tree draws the hierarchy)", group: "item",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				tree := fs.Bool("tree", false, "draw the hierarchy")
				status := fs.String("status", "", "only items with this status")
				kind := fs.String("kind", "", "only items of this kind")
				parent := fs.String("parent", "", "only the children of this item (id or id prefix)")
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					f := apiclient.WorkItemFilter{Status: *status, Kind: *kind}
					if *parent != "" {
						if f.ParentID, err = x.id(c, itemIDs, *parent); err != nil {
							return err
						}
					}
					items, err := c.ListWorkItems(x.ctx, x.args[0], f)
					if err != nil {
						return err
					}
					switch {
					case *asJSON:
						return printJSON(x.stdout, wire.WorkItemList{WorkItems: nonNil(items)})
					case *tree:
						renderTree(x.stdout, items)
					default:
						printItems(x.stdout, items)
					}
					return nil
				}
			},
		},
		{
			name: "show", args: "ID", nargs: 1, names: itemIDs, summary: "show a work item", group: "item",
			setup: showSetup((*apiclient.Client).GetWorkItem, printItem),
		},
		{
			name: "move", args: "ID", nargs: 1, names: itemIDs, summary: "change a work item's status, parent or position", group: "item",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				status := fs.String("status", "", "new status: todo, doing, done or cancelled")
				parent := fs.String("parent", "", "id or id prefix of the new parent")
				toRoot := fs.Bool("root", false, "move to the project root")
				position := fs.Int("position", 0, "new position among its siblings")
				asJSON := fs.Bool("json", false, "print the moved item as JSON")
				return func(x *invocation) error {
					given := givenFlags(fs)
					var req wire.UpdateWorkItem
					if given["parent"] && given["root"] {
						return usagef("--parent and --root exclude each other")
					}
					if given["status"] {
						req.Status = status
					}
					if given["parent"] {
						req.ParentID = wire.Optional{Set: true, Value: parent}
					}
					if given["root"] && *toRoot {
						req.ParentID = wire.Optional{Set: true}
					}
					if given["position"] {
						req.Position = position
					}
					if req.Status == nil && !req.ParentID.Set && req.Position == nil {
						return usagef("nothing to change: give --status, --parent, --root or --position")
					}
					if given["parent"] {
						c, err := x.client()
						if err != nil {
							return err
						}
						id, err := x.id(c, itemIDs, *parent)
						if err != nil {
							return err
						}
						req.ParentID.Value = &id
					}
					return updateItem(x, req, *asJSON, "moved")
				}
			},
		},
		{
			name: "update", args: "ID", nargs: 1, names: itemIDs, summary: "change a work item's title, body or position (only the flags given)", group: "item",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				title := fs.String("title", "", "new title")
				body := fs.String("body", "", "new body")
				position := fs.Int("position", 0, "new position among its siblings")
				asJSON := fs.Bool("json", false, "print the updated item as JSON")
				return func(x *invocation) error {
					given := givenFlags(fs)
					var req wire.UpdateWorkItem
					if given["title"] {
						req.Title = title
					}
					if given["body"] {
						req.Body = body
					}
					if given["position"] {
						req.Position = position
					}
					if req.Title == nil && req.Body == nil && req.Position == nil {
						return usagef("nothing to change: give --title, --body or --position")
					}
					return updateItem(x, req, *asJSON, "updated")
				}
			},
		},
		{
			name: "delete", args: "ID", nargs: 1, names: itemIDs, summary: "delete a work item without children or runs", group: "item",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					if err := c.DeleteWorkItem(x.ctx, x.args[0]); err != nil {
						return err
					}
					fmt.Fprintf(x.stdout, "deleted %s\n", x.args[0])
					return nil
				}
			},
		},
	},
}

func updateItem(x *invocation, req wire.UpdateWorkItem, asJSON bool, verb string) error {
	c, err := x.client()
	if err != nil {
		return err
	}
	w, err := c.UpdateWorkItem(x.ctx, x.args[0], req)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(x.stdout, w)
	}
	fmt.Fprintf(x.stdout, "%s %s %s: %s, parent %s, position %d\n", verb, w.Kind, shortID(w.ID), w.Status, optionalShort(w.ParentID), w.Position)
	return nil
}

func optionalShort(id *string) string {
	if id == nil {
		return "(root)"
	}
	return shortID(*id)
}

func printItems(w io.Writer, items []wire.WorkItem) {
	tw := table(w)
	fmt.Fprintln(tw, "ID\tKIND\tSTATUS\tPARENT\tPOS\tTITLE")
	for _, it := range items {
		parent := "-"
		if it.ParentID != nil {
			parent = shortID(*it.ParentID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", shortID(it.ID), it.Kind, it.Status, parent, it.Position, it.Title)
	}
	tw.Flush()
}

func printItem(w io.Writer, it *wire.WorkItem) {
	tw := table(w)
	fmt.Fprintf(tw, "id:\t%s\n", it.ID)
	fmt.Fprintf(tw, "project_id:\t%s\n", it.ProjectID)
	fmt.Fprintf(tw, "parent_id:\t%s\n", optionalString(it.ParentID))
	fmt.Fprintf(tw, "kind:\t%s\n", it.Kind)
	fmt.Fprintf(tw, "title:\t%s\n", it.Title)
	fmt.Fprintf(tw, "status:\t%s\n", it.Status)
	fmt.Fprintf(tw, "position:\t%d\n", it.Position)
	fmt.Fprintf(tw, "path:\t%s\n", it.Path)
	fmt.Fprintf(tw, "created_at:\t%s\n", rfc3339(&it.CreatedAt))
	fmt.Fprintf(tw, "updated_at:\t%s\n", rfc3339(&it.UpdatedAt))
	tw.Flush()
	if it.Body != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(it.Body, "\n"))
	}
}

// renderTree draws items as a tree with box-drawing characters. items
// come in the server's tree order (depth-first, siblings by position);
// the order is kept, and an item whose parent is not in the list (the
// list was filtered) is drawn as a root.
func renderTree(w io.Writer, items []wire.WorkItem) {
	present := make(map[string]bool, len(items))
	for _, it := range items {
		present[it.ID] = true
	}
	children := map[string][]wire.WorkItem{}
	var roots []wire.WorkItem
	for _, it := range items {
		if it.ParentID != nil && present[*it.ParentID] && *it.ParentID != it.ID {
			children[*it.ParentID] = append(children[*it.ParentID], it)
		} else {
			roots = append(roots, it)
		}
	}
	line := func(it wire.WorkItem) string {
		return fmt.Sprintf("%s  %s  %s  (%s)", it.Kind, it.Status, it.Title, shortID(it.ID))
	}
	seen := map[string]bool{}
	var walk func(it wire.WorkItem, prefix string)
	walk = func(it wire.WorkItem, prefix string) {
		kids := children[it.ID]
		for i, k := range kids {
			if seen[k.ID] {
				continue // a cycle in bad data must not loop forever
			}
			seen[k.ID] = true
			branch, indent := "├── ", "│   "
			if i == len(kids)-1 {
				branch, indent = "└── ", "    "
			}
			fmt.Fprintf(w, "%s%s%s\n", prefix, branch, line(k))
			walk(k, prefix+indent)
		}
	}
	for _, r := range roots {
		seen[r.ID] = true
		fmt.Fprintln(w, line(r))
		walk(r, "")
	}
}
