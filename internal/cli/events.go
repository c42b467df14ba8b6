package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// reconnectMax caps the reconnect backoff of `pam events --follow`, which
// starts at Env.ReconnectMin.
const reconnectMax = 10 * time.Second

var eventsCmd = &command{
	name:    "events",
	summary: "list the newest events of the journal, or follow it live (--follow); --after N for the history after seq N",
	group:   "events",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		after := fs.Int64("after", 0, "the events after this seq, oldest first (without it: the newest, or with --follow live from now)")
		topic := fs.String("topic", "", "topic glob, e.g. run.* (* matches within a dot-separated segment)")
		limit := fs.Int("limit", 0, "at most this many events (default 100)")
		follow := fs.Bool("follow", false, "stream events live until interrupted, from now (or after --after first), reconnecting by itself")
		asJSON := fs.Bool("json", false, "print the API's JSON (with --follow: one Event per line)")
		return func(x *invocation) error {
			if _, err := wire.ParseTopicGlob(*topic); err != nil {
				return usagef("--topic: %v", err)
			}
			if *after < 0 || *limit < 0 {
				return usagef("--after and --limit cannot be negative")
			}
			fromSeq := false // --after given: history from there
			fs.Visit(func(f *flag.Flag) { fromSeq = fromSeq || f.Name == "after" })
			c, err := x.client()
			if err != nil {
				return err
			}
			if *follow {
				if !fromSeq {
					// Live: from the journal's position now, so that a
					// reconnect before the first event misses nothing.
					if _, *after, err = c.ListEventsSeq(x.ctx, 0, *topic, 1); err != nil {
						return err
					}
					if *after <= 0 {
						*after = -1 // no position known: the stream's own live start
					}
				}
				return followEvents(x, c, *after, *topic, *asJSON)
			}
			var evs []wire.Event
			if fromSeq {
				evs, err = c.ListEvents(x.ctx, *after, *topic, *limit)
			} else {
				evs, err = newestEvents(x, c, *topic, cmp.Or(*limit, defaultEventLimit))
			}
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(x.stdout, wire.EventList{Events: nonNil(evs)})
			}
			tw := table(x.stdout)
			fmt.Fprintln(tw, "SEQ\tTIME\tTOPIC\tPAYLOAD")
			for _, e := range evs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", e.Seq, rfc3339(&e.CreatedAt), e.Topic, compact(e.Payload))
			}
			return tw.Flush()
		}
	},
}

const (
	// defaultEventLimit is how many events pam events prints by default,
	// as many as GET /events answers by default.
	defaultEventLimit = 100
	// eventPage is the most events one GET /events answers.
	eventPage = 1000
)

// newestEvents returns the newest limit events of topic, oldest first.
// GET /events reads forward from a seq, so it looks back from the
// journal's position in windows that grow fourfold until one holds
// limit events or reaches the start: seqs are nearly dense, so for all
// topics the first window usually does.
func newestEvents(x *invocation, c *apiclient.Client, topic string, limit int) ([]wire.Event, error) {
	page := min(limit, eventPage)
	first, head, err := c.ListEventsSeq(x.ctx, 0, topic, page)
	if err != nil {
		return nil, err
	}
	if len(first) < page {
		return first, nil // the whole journal
	}
	if head <= 0 { // a server that does not say where its journal is
		head = math.MaxInt64
	}
	for w := int64(limit); ; w *= 4 {
		lo := max(0, head-w)
		if head == math.MaxInt64 {
			lo = 0
		}
		evs, err := eventsBetween(x, c, lo, head, topic)
		if err != nil {
			return nil, err
		}
		if len(evs) >= limit || lo == 0 {
			return evs[max(0, len(evs)-limit):], nil
		}
	}
}

// eventsBetween returns the events of topic with lo < seq <= hi.
func eventsBetween(x *invocation, c *apiclient.Client, lo, hi int64, topic string) ([]wire.Event, error) {
	var out []wire.Event
	for {
		page, err := c.ListEvents(x.ctx, lo, topic, eventPage)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if e.Seq > hi {
				return out, nil
			}
			out = append(out, e)
		}
		if len(page) < eventPage {
			return out, nil
		}
		lo = page[len(page)-1].Seq
	}
}

// followEvents streams events until ctx ends (exit 0). A dropped stream
// is resumed after the last seq seen, with backoff; a refusal by the
// server (4xx) ends the command.
func followEvents(x *invocation, c *apiclient.Client, after int64, topic string, asJSON bool) error {
	delay := x.env.ReconnectMin
	for {
		received := false
		err := c.StreamEvents(x.ctx, after, topic, func(name, id string, data []byte) error {
			received = true
			if seq, err := strconv.ParseInt(id, 10, 64); err == nil && seq > after {
				after = seq
			}
			return printStreamed(x.stdout, name, data, asJSON)
		})
		if x.ctx.Err() != nil {
			return nil
		}
		var we *wire.Error
		if errors.As(err, &we) && we.Status/100 == 4 && we.Status != http.StatusRequestTimeout && we.Status != http.StatusTooManyRequests {
			return err
		}
		var pe printError
		if errors.As(err, &pe) {
			return pe.err
		}
		if received {
			delay = x.env.ReconnectMin
		}
		what := "stream closed"
		if err != nil {
			what = "connection lost: " + describe(err)
		}
		fmt.Fprintf(x.stderr, "pam events: %s; reconnecting in %s\n", what, delay)
		select {
		case <-x.ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(delay*2, reconnectMax)
	}
}

// printError is a failure to write our own output (a closed pipe), which
// reconnecting cannot cure.
type printError struct{ err error }

func (e printError) Error() string { return e.err.Error() }

func printStreamed(w io.Writer, name string, data []byte, asJSON bool) error {
	var err error
	if asJSON {
		_, err = fmt.Fprintf(w, "%s\n", compact(data))
	} else if name == "snapshot" {
		var s wire.Snapshot
		if json.Unmarshal(data, &s) == nil {
			_, err = fmt.Fprintf(w, "-  snapshot  %s: %d non-terminal runs, %d hosts\n", s.Reason, len(s.Runs), len(s.Hosts))
		} else {
			_, err = fmt.Fprintf(w, "-  snapshot  %s\n", compact(data))
		}
	} else {
		var e wire.Event
		if json.Unmarshal(data, &e) == nil && e.Topic != "" {
			_, err = fmt.Fprintf(w, "%d  %s  %s  %s\n", e.Seq, rfc3339(&e.CreatedAt), e.Topic, compact(e.Payload))
		} else {
			_, err = fmt.Fprintf(w, "-  -  %s  %s\n", name, compact(data))
		}
	}
	if err != nil {
		return printError{err}
	}
	return nil
}

// compact renders JSON on one line; anything else is returned as is.
func compact(b []byte) string {
	if len(b) == 0 {
		return "null"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}
