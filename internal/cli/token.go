package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// pam token: named API tokens with a role (docs/architecture.md#security-model).
// Managing them takes an admin token; create and rotate print the secret
// this once, on its own line, never inside a suggested command line.
var tokenCmd = &command{
	name:    "token",
	summary: "create, list, revoke and rotate named API tokens (roles admin, operator, viewer)",
	subs: []*command{
		{
			name: "create", args: "NAME", nargs: 1, summary: "create a named token of a role and print its secret (shown only this once)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				role := fs.String("role", wire.RoleViewer, "admin (everything), operator (projects, items, runs and their terminal) or viewer (reads, streams, watching panes)")
				asJSON := fs.Bool("json", false, "print the API's JSON (it holds the secret)")
				return func(x *invocation) error {
					if wire.RoleRank(*role) == 0 {
						return usagef("--role must be admin, operator or viewer, not %q", *role)
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					out, err := c.CreateToken(x.ctx, wire.CreateToken{Name: x.args[0], Role: *role})
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, out)
					}
					fmt.Fprintf(x.stdout, "created token %s (%s), role %s\n\n", out.Token.Name, out.Token.ID, out.Token.Role)
					printTokenSecret(x.stdout, out.Secret)
					return nil
				}
			},
		},
		{
			name: "list", summary: "list the live tokens (never their secrets)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					ts, err := c.ListTokens(x.ctx)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, wire.TokenList{Tokens: nonNil(ts)})
					}
					tw := table(x.stdout)
					fmt.Fprintln(tw, "NAME\tROLE\tCREATED\tLAST-USED\tID")
					for _, t := range ts {
						used := "never"
						if t.LastUsedAt != nil {
							used = ago(*t.LastUsedAt, x.env.Now())
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, ago(t.CreatedAt, x.env.Now()), used, t.ID)
					}
					tw.Flush()
					return nil
				}
			},
		},
		{
			name: "revoke", args: "NAME", nargs: 1, summary: "revoke a token (by name or id): refused at once on every serve, its streams closed", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					t, err := findToken(x.ctx, c, x.args[0])
					if err != nil {
						return err
					}
					if err := c.RevokeAPIToken(x.ctx, t.ID); err != nil {
						return err
					}
					fmt.Fprintf(x.stdout, "revoked token %s\n", t.Name)
					return nil
				}
			},
		},
		{
			name: "rotate", args: "NAME", nargs: 1, summary: "give a token (by name or id) a new secret; the old one stops working at once", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the API's JSON (it holds the secret)")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					t, err := findToken(x.ctx, c, x.args[0])
					if err != nil {
						return err
					}
					out, err := c.RotateAPIToken(x.ctx, t.ID)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, out)
					}
					fmt.Fprintf(x.stdout, "rotated token %s; the old secret no longer works\n\n", out.Token.Name)
					printTokenSecret(x.stdout, out.Secret)
					if out.Token.Name == wire.AdminTokenName {
						fmt.Fprintf(x.stdout, "This is the admin token: the serve that rotated it rewrote its token file (<data>/token); update PAM_TOKEN wherever you set it.\n")
					}
					return nil
				}
			},
		},
	},
}

// findToken resolves a token's name, id or unique id prefix among the
// live tokens.
func findToken(ctx context.Context, c *apiclient.Client, ref string) (wire.Token, error) {
	ts, err := c.ListTokens(ctx)
	if err != nil {
		return wire.Token{}, err
	}
	return pickByRef(ts, ref, func(t wire.Token) string { return t.ID }, func(t wire.Token) string { return t.Name },
		"live token", "pam token list")
}

// printTokenSecret shows a secret once, on its own line.
func printTokenSecret(w io.Writer, secret string) {
	fmt.Fprintf(w, "Secret (shown only this once; pam keeps only its hash):\n\n  %s\n\n", secret)
	fmt.Fprintf(w, "Give it to its holder, who sets it as PAM_TOKEN (or stores it in a 0600 file for --token-file).\n")
}
