package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// notifyCmd manages notification channels (docs/notifications.md).
var notifyCmd = &command{
	name:    "notify",
	summary: "add, list, test and remove notification channels (webhook, ntfy, Slack)",
	subs: []*command{
		{
			name: "add", args: "NAME", nargs: 1, group: clientGroup,
			summary: "add a channel and print its signing secret (shown only this once)",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				kind := fs.String("kind", "", "webhook, ntfy or slack (required)")
				target := fs.String("to", "", "where to POST: the webhook's URL, the ntfy topic's URL (https://ntfy.sh/TOPIC) or the Slack incoming webhook (required)")
				events := fs.String("events", "run.attention,run.failed", "event topics, comma-separated topic globs (* matches within one segment, e.g. run.*)")
				project := fs.String("project", "", "only this project's events (slug or id)")
				asJSON := fs.Bool("json", false, "print the API's JSON (it holds the secret)")
				return func(x *invocation) error {
					if *kind == "" || *target == "" {
						return usagef("--kind and --to are required")
					}
					body := wire.CreateChannel{Name: x.args[0], Kind: *kind, URL: *target}
					for _, e := range strings.Split(*events, ",") {
						if e = strings.TrimSpace(e); e != "" {
							body.Events = append(body.Events, e)
						}
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					if *project != "" {
						p, err := c.GetProject(x.ctx, *project)
						if err != nil {
							return err
						}
						body.ProjectID = &p.ID
					}
					out, err := c.CreateChannel(x.ctx, body)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, out)
					}
					fmt.Fprintf(x.stdout, "added %s channel %s (%s) for %s\n", out.Channel.Kind, out.Channel.Name, out.Channel.ID, strings.Join(out.Channel.Events, ", "))
					if out.Channel.Kind == wire.ChannelWebhook {
						fmt.Fprintf(x.stdout, "\nsigning secret (shown only this once): %s\n", out.Secret)
						fmt.Fprintln(x.stdout, "each POST carries Pam-Signature: sha256=<hex HMAC-SHA256 of the body keyed with it>")
					}
					return nil
				}
			},
		},
		{
			name: "list", summary: "list channels", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					cs, err := c.ListChannels(x.ctx)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, wire.ChannelList{Channels: nonNil(cs)})
					}
					printChannels(x.stdout, cs)
					return nil
				}
			},
		},
		{
			name: "test", args: "CHANNEL", nargs: 1, group: clientGroup,
			summary: "send a channel a test message and say what came of it",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				wait := fs.Duration("wait", 15*time.Second, "how long to wait for the attempt's outcome (0: only queue it)")
				asJSON := fs.Bool("json", false, "print the attempt as JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					ch, err := findChannel(x.ctx, c, x.args[0])
					if err != nil {
						return err
					}
					before, err := c.ChannelDeliveries(x.ctx, ch.ID)
					if err != nil {
						return err
					}
					var last int64
					if len(before) > 0 {
						last = before[0].ID
					}
					if err := c.TestChannel(x.ctx, ch.ID); err != nil {
						return err
					}
					d, err := awaitTest(x.ctx, c, ch.ID, last, *wait)
					if err != nil {
						return err
					}
					if *asJSON {
						if d == nil {
							return printJSON(x.stdout, map[string]bool{"queued": true})
						}
						return printJSON(x.stdout, d)
					}
					switch {
					case d == nil:
						fmt.Fprintf(x.stdout, "queued a test message to %s\n", ch.Name)
					case d.Status == wire.DeliveryDelivered:
						fmt.Fprintf(x.stdout, "delivered a test message to %s (%s)\n", ch.Name, codeOf(d))
					default:
						fmt.Fprintf(x.stderr, "the test message to %s failed (%s): %s; pam retries it with backoff\n", ch.Name, codeOf(d), optionalString(d.Error))
						return errSilent
					}
					return nil
				}
			},
		},
		{
			name: "remove", args: "CHANNEL", nargs: 1, group: clientGroup,
			summary: "remove a channel (by name or id) and its deliveries",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					ch, err := findChannel(x.ctx, c, x.args[0])
					if err != nil {
						return err
					}
					if err := c.DeleteChannel(x.ctx, ch.ID); err != nil {
						return err
					}
					fmt.Fprintf(x.stdout, "removed channel %s\n", ch.Name)
					return nil
				}
			},
		},
	},
}

// findChannel resolves a channel by name, id or id prefix.
func findChannel(ctx context.Context, c *apiclient.Client, ref string) (wire.Channel, error) {
	cs, err := c.ListChannels(ctx)
	if err != nil {
		return wire.Channel{}, err
	}
	return pickByRef(cs, ref, func(ch wire.Channel) string { return ch.ID }, func(ch wire.Channel) string { return ch.Name },
		"channel", "pam notify list")
}

// awaitTest waits up to wait for the outcome of the test attempt queued
// after the attempt with id after; nil when none came in time.
func awaitTest(ctx context.Context, c *apiclient.Client, id string, after int64, wait time.Duration) (*wire.Delivery, error) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		ds, err := c.ChannelDeliveries(ctx, id)
		if err != nil {
			return nil, err
		}
		for i := len(ds) - 1; i >= 0; i-- {
			d := ds[i]
			if d.ID > after && d.EventSeq == nil && d.Status != wire.DeliveryPending && d.Status != wire.DeliverySending {
				return &d, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, nil
}

func codeOf(d *wire.Delivery) string {
	if d.ResponseCode == nil {
		return "no answer"
	}
	return fmt.Sprintf("HTTP %d", *d.ResponseCode)
}

func printChannels(w io.Writer, cs []wire.Channel) {
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tKIND\tEVENTS\tPROJECT\tURL\tID")
	for _, c := range cs {
		project := "-"
		if c.ProjectID != nil {
			project = shortID(*c.ProjectID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Kind, strings.Join(c.Events, ","), project, c.URL, c.ID)
	}
	tw.Flush()
}
