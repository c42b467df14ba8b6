package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// Every argument and option that names a project, work item, run or host
// by id takes the whole id or a unique prefix of it — the 8 characters the
// tables print will do — and a project's slug or a host's name where the
// API takes those (docs/api.md#finding-an-object-by-id-prefix). The
// lookups are the server's (?id_prefix=), so resolving never lists every
// run on the client.

// minIDPrefix is the fewest characters of an id that pam looks up, as
// git does: shorter is more likely a slip (a position, a half-typed name)
// than an id, and a destructive command must not act on one. Four hex
// digits already spread ids over 65536 prefixes.
const minIDPrefix = 4

// idKind is a kind of object the command line names by id.
type idKind struct {
	noun, plural string
	// get looks up a slug or a name the API's {ref} takes (projects,
	// hosts); nil for the kinds named by id alone.
	get func(ctx context.Context, c *apiclient.Client, ref string) (id string, err error)
	// find returns the objects whose id starts with prefix.
	find func(ctx context.Context, c *apiclient.Client, prefix string) ([]candidate, error)
	// needsHosts: the candidates' columns name hosts, so an ambiguous
	// prefix reads the host list.
	needsHosts bool
}

// candidate is one object an id prefix matches, with the columns that
// tell it apart from the others when the prefix is ambiguous.
type candidate struct {
	id   string
	cols func(hosts hostNames) []string
}

var (
	projectIDs = &idKind{
		noun: "project", plural: "projects",
		get: func(ctx context.Context, c *apiclient.Client, ref string) (string, error) {
			p, err := c.GetProject(ctx, ref)
			if err != nil {
				return "", err
			}
			return p.ID, nil
		},
		find: func(ctx context.Context, c *apiclient.Client, prefix string) ([]candidate, error) {
			ps, err := c.FindProjects(ctx, prefix)
			return candidates(ps, err, func(p wire.Project) candidate {
				return candidate{p.ID, func(hostNames) []string { return []string{p.Slug, p.Status, p.Name} }}
			})
		},
	}
	hostIDs = &idKind{
		noun: "host", plural: "hosts",
		get: func(ctx context.Context, c *apiclient.Client, ref string) (string, error) {
			h, err := c.GetHost(ctx, ref)
			if err != nil {
				return "", err
			}
			return h.ID, nil
		},
		find: func(ctx context.Context, c *apiclient.Client, prefix string) ([]candidate, error) {
			hs, err := c.FindHosts(ctx, prefix)
			return candidates(hs, err, func(h wire.Host) candidate {
				return candidate{h.ID, func(hostNames) []string { return []string{h.Name, hostStatus(h)} }}
			})
		},
	}
	itemIDs = &idKind{
		noun: "work item", plural: "work items",
		find: func(ctx context.Context, c *apiclient.Client, prefix string) ([]candidate, error) {
			ws, err := c.FindWorkItems(ctx, prefix)
			return candidates(ws, err, func(w wire.WorkItem) candidate {
				return candidate{w.ID, func(hostNames) []string { return []string{w.Kind, w.Status, w.Title} }}
			})
		},
	}
	runIDs = &idKind{
		noun: "run", plural: "runs", needsHosts: true,
		find: func(ctx context.Context, c *apiclient.Client, prefix string) ([]candidate, error) {
			rs, err := c.FindRuns(ctx, prefix)
			return candidates(rs, err, func(r wire.Run) candidate {
				return candidate{r.ID, func(hosts hostNames) []string {
					return []string{r.Status, r.Provider, "host " + runHost(r, hosts), "task " + shortID(r.TaskID)}
				}}
			})
		},
	}
)

func candidates[T any](objs []T, err error, f func(T) candidate) ([]candidate, error) {
	if err != nil {
		return nil, err
	}
	out := make([]candidate, len(objs))
	for i, o := range objs {
		out[i] = f(o)
	}
	return out, nil
}

// ref turns what the operator typed for an object of kind k into what a
// path of the API takes: a whole id, or a project's slug or a host's
// name, as they are; else the one id that starts with arg. A slug or a
// name that reads like hex ("cafe") wins over an id prefix.
func (x *invocation) ref(c *apiclient.Client, k *idKind, arg string) (string, error) {
	if _, err := uuid.Parse(arg); err == nil {
		return arg, nil
	}
	prefix, err := wire.ParseIDPrefix(arg)
	if err != nil || len(arg) < minIDPrefix {
		if k.get != nil {
			return arg, nil // a slug or a name; the server says if it names nothing
		}
		if err != nil {
			return "", fmt.Errorf("no %s matches %q", k.noun, arg)
		}
		return "", fmt.Errorf("%q is too short to name a %s: give at least %d characters of its id", arg, k.noun, minIDPrefix)
	}
	if k.get != nil {
		id, err := k.get(x.ctx, c, arg)
		if we, ok := wire.AsError(err); !ok || we.Code != wire.CodeNotFound {
			return id, err // found by name, or a failure other than not_found
		}
	}
	found, err := k.find(x.ctx, c, prefix.Prefix)
	if err != nil {
		return "", fmt.Errorf("look up %s %s: %w", k.noun, arg, err)
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no %s matches %q", k.noun, arg)
	case 1:
		return found[0].id, nil
	}
	var hosts hostNames
	if k.needsHosts {
		hosts = x.hostNames(c)
	}
	return "", ambiguous(k, arg, found, hosts)
}

// id is ref for the places that need the id itself (a filter, a body
// field): a slug or a name is looked up too.
func (x *invocation) id(c *apiclient.Client, k *idKind, arg string) (string, error) {
	ref, err := x.ref(c, k, arg)
	if err != nil {
		return "", err
	}
	if _, err := uuid.Parse(ref); err == nil || k.get == nil {
		return ref, nil
	}
	id, err := k.get(x.ctx, c, ref)
	if err != nil {
		return "", fmt.Errorf("%s %s: %s", k.noun, ref, describe(err))
	}
	return id, nil
}

// ambiguous is the error of a prefix that matches several objects: it
// lists them, so the operator can pick one and type more of its id.
func ambiguous(k *idKind, arg string, found []candidate, hosts hostNames) error {
	var b strings.Builder
	more := ""
	if len(found) >= wire.MaxIDPrefixMatches {
		more = " or more"
	}
	fmt.Fprintf(&b, "%q matches %d %s%s; give more characters of the id:\n", arg, len(found), k.plural, more)
	tw := table(&b)
	for _, f := range found {
		fmt.Fprintf(tw, "  %s\t%s\n", f.id, strings.Join(f.cols(hosts), "\t"))
	}
	tw.Flush()
	return errors.New(strings.TrimRight(b.String(), "\n"))
}

// pickByRef finds, in a short list the client already has (tokens,
// notification channels), the item a reference names: its name or whole
// id, else the one item whose id starts with it (at least minIDPrefix
// characters). noun and list say what it is and how to see them all.
func pickByRef[T any](items []T, ref string, id, name func(T) string, noun, list string) (T, error) {
	var found []T
	for _, it := range items {
		if name(it) == ref || id(it) == ref {
			return it, nil
		}
		if len(ref) >= minIDPrefix && strings.HasPrefix(id(it), strings.ToLower(ref)) {
			found = append(found, it)
		}
	}
	var zero T
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return zero, fmt.Errorf("no %s %q (%s shows them)", noun, ref, list)
	}
	return zero, fmt.Errorf("%q names %d %ss; give more of the id", ref, len(found), noun)
}
