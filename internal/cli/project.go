package cli

import (
	"flag"
	"fmt"
	"io"
	"time"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

var projectCmd = &command{
	name:    "project",
	summary: "create, list, show, update, archive and unarchive projects",
	subs: []*command{
		{
			name: "create", summary: "create a project", group: "project",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				name := fs.String("name", "", "project name (required)")
				slug := fs.String("slug", "", "slug (default: derived from the name)")
				desc := fs.String("description", "", "description")
				autoDone := fs.Bool("auto-done", true, "move a work item to done when its run completes")
				autoContinue := fs.Bool("auto-continue", true, "send a rate-limited agent its continue message when the limit resets")
				repo := addRepoFlags(fs, false)
				asJSON := fs.Bool("json", false, "print the created project as JSON")
				return func(x *invocation) error {
					if *name == "" {
						return usagef("--name is required")
					}
					body := wire.CreateProject{Name: *name}
					given := givenFlags(fs)
					if given["slug"] {
						body.Slug = slug
					}
					if given["description"] {
						body.Description = desc
					}
					if given["auto-done"] {
						body.AutoDone = autoDone
					}
					if given["auto-continue"] {
						body.AutoContinue = autoContinue
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					if body.Repo, _, err = repo.input(x, c, given, ""); err != nil {
						return err
					}
					p, err := c.CreateProject(x.ctx, body)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, p)
					}
					fmt.Fprintf(x.stdout, "created project %s (%s)\n", p.Slug, p.ID)
					return nil
				}
			},
		},
		{
			name: "list", summary: "list projects", group: "project",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				all := fs.Bool("all", false, "include archived projects")
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					ps, err := c.ListProjects(x.ctx, *all)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, wire.ProjectList{Projects: nonNil(ps)})
					}
					printProjects(x.stdout, ps, x.env.Now())
					return nil
				}
			},
		},
		{
			name: "show", args: "REF", nargs: 1, names: projectIDs, summary: "show a project (by slug, id or id prefix)", group: "project",
			setup: showSetup((*apiclient.Client).GetProject, printProject),
		},
		{
			name: "update", args: "REF", nargs: 1, names: projectIDs, summary: "change a project's name, description, auto-done, auto-continue or repo (only the flags given)", group: "project",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				name := fs.String("name", "", "new name")
				desc := fs.String("description", "", "new description")
				autoDone := fs.Bool("auto-done", true, "move a work item to done when its run completes")
				autoContinue := fs.Bool("auto-continue", true, "send a rate-limited agent its continue message when the limit resets")
				repo := addRepoFlags(fs, true)
				asJSON := fs.Bool("json", false, "print the updated project as JSON")
				return func(x *invocation) error {
					var body wire.UpdateProject
					given := givenFlags(fs)
					if given["name"] {
						body.Name = name
					}
					if given["description"] {
						body.Description = desc
					}
					if given["auto-done"] {
						body.AutoDone = autoDone
					}
					if given["auto-continue"] {
						body.AutoContinue = autoContinue
					}
					if body == (wire.UpdateProject{}) && !given["repo"] && !given["base"] {
						return usagef("nothing to change: give --name, --description, --auto-done, --auto-continue, --repo or --base")
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					if in, set, err := repo.input(x, c, given, x.args[0]); err != nil {
						return err
					} else if set {
						body.Repo = wire.OptionalRepo{Set: true, Value: in}
					}
					p, err := c.UpdateProject(x.ctx, x.args[0], body)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, p)
					}
					fmt.Fprintf(x.stdout, "updated project %s\n", p.Slug)
					return nil
				}
			},
		},
		{
			name: "archive", args: "REF", nargs: 1, names: projectIDs, summary: "archive a project (soft delete)", group: "project",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the archived project as JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					p, err := c.ArchiveProject(x.ctx, x.args[0])
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, p)
					}
					fmt.Fprintf(x.stdout, "archived project %s\n", p.Slug)
					return nil
				}
			},
		},
		{
			name: "unarchive", args: "REF", nargs: 1, names: projectIDs, summary: "make an archived project active again", group: "project",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the project as JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					p, err := c.UnarchiveProject(x.ctx, x.args[0])
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, p)
					}
					fmt.Fprintf(x.stdout, "unarchived project %s\n", p.Slug)
					return nil
				}
			},
		},
	},
}

// givenFlags is the set of flags given on the command line, so that
// updates send only what the operator asked to change.
func givenFlags(fs *flag.FlagSet) map[string]bool {
	m := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
}

// nonNil keeps --json output a list ("[]"), never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func printProjects(w io.Writer, ps []wire.Project, now time.Time) {
	tw := table(w)
	fmt.Fprintln(tw, "SLUG\tNAME\tSTATUS\tAUTO-DONE\tUPDATED\tID")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\n", p.Slug, p.Name, p.Status, p.AutoDone, ago(p.UpdatedAt, now), p.ID)
	}
	tw.Flush()
}

func printProject(w io.Writer, p *wire.Project) {
	tw := table(w)
	fmt.Fprintf(tw, "id:\t%s\n", p.ID)
	fmt.Fprintf(tw, "name:\t%s\n", p.Name)
	fmt.Fprintf(tw, "slug:\t%s\n", p.Slug)
	fmt.Fprintf(tw, "status:\t%s\n", p.Status)
	fmt.Fprintf(tw, "auto_done:\t%t\n", p.AutoDone)
	fmt.Fprintf(tw, "auto_continue:\t%t\n", p.AutoContinue)
	if p.Repo != nil {
		fmt.Fprintf(tw, "repo:\t%s\n", p.Repo.URL)
		fmt.Fprintf(tw, "base:\t%s\n", dash(p.Repo.Base))
	}
	fmt.Fprintf(tw, "description:\t%s\n", p.Description)
	fmt.Fprintf(tw, "created_at:\t%s\n", rfc3339(&p.CreatedAt))
	fmt.Fprintf(tw, "updated_at:\t%s\n", rfc3339(&p.UpdatedAt))
	tw.Flush()
}
