package webui_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// Answering without the terminal (docs/architecture.md#web-dashboard,
// #attention): the question a run is asked and its choices, in its Inbox
// card and on its run page; a choice's button presses its key, the reply
// box and a live run's message box send a message (docs/api.md#messages),
// and what came of it shows.

// setAttention writes a running run's attention and its detail straight
// into the database, as the screen reading will (no event: the page is
// loaded again after it).
func (d *dash) setAttention(id, attention string, detail map[string]any) {
	d.t.Helper()
	b, err := json.Marshal(detail)
	if err != nil {
		d.t.Fatal(err)
	}
	conn, err := pgx.Connect(d.t.Context(), d.serveOpts.DatabaseURL)
	if err != nil {
		d.t.Fatal(err)
	}
	defer conn.Close(d.t.Context())
	tag, err := conn.Exec(d.t.Context(), `UPDATE runs SET attention = $2, attention_since = coalesce(attention_since, now()), attention_detail = $3::jsonb
		WHERE id = $1 AND status = 'running'`, id, attention, string(b))
	if err != nil || tag.RowsAffected() != 1 {
		d.t.Fatalf("set the attention of %s: %v (%d rows)", id, err, tag.RowsAffected())
	}
}

// askWithChoices starts a run that shows a question with choices, asks
// for input through its hook once its pane shows them (so no later pane
// change clears the attention), reads one key and prints "picked KEY".
// Its attention detail is set as the screen reading gives it, with choice
// labels holding an escape sequence and HTML.
func (d *dash) askWithChoices(t *testing.T) wire.Run {
	t.Helper()
	gate := pamtest.ShortDir(t, "pamq-")
	r := d.shellRun("Apply the migration", fmt.Sprintf(`printf 'Do you want to apply the migration?\n> 1. Yes\n  2. No\n'; while [ ! -e %[1]s/ask ]; do sleep 0.05; done; %[2]s; `+
		`stty -icanon min 1; c=$(dd bs=1 count=1 2>/dev/null); stty icanon; echo "picked $c"; exec cat`, gate, hookScript(t, "needs-input")))
	d.waitPane(r.ID, "2. No")
	if err := os.WriteFile(gate+"/ask", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitRun(r.ID, "to need input", func(r wire.Run) bool { return r.Attention == wire.AttentionNeedsInput })
	d.setAttention(r.ID, wire.AttentionNeedsInput, map[string]any{"source": "screen", "resets_at": nil,
		"text": "Do you want to apply the migration?\nIt rewrites the runs table.",
		"choices": []map[string]string{{"key": "1", "label": "Yes"}, {"key": "2", "label": "No, and tell the agent \x1b[31mwhy\x1b[0m"},
			{"key": "Escape", "label": `<img src=x onerror="document.title='pwned'">`}}})
	return r
}

// rateLimitedRun starts a run that says it hit its usage limit, with the
// attention the screen reading gives it: rate_limited, resetting in 3 h.
func (d *dash) rateLimitedRun() wire.Run {
	d.t.Helper()
	r := d.shellRun("Summarise the logs", "echo 'Claude usage limit reached.'; exec cat")
	d.waitPane(r.ID, "usage limit")
	resets := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Minute)
	d.setAttention(r.ID, wire.AttentionRateLimited, map[string]any{"source": "screen", "text": "Claude usage limit reached.",
		"choices": []any{}, "resets_at": resets.Format(time.RFC3339)})
	return r
}

// checkChoices checks the choices the inbox card shows: each button
// holds its key and its label as text, whatever the label holds.
func (d *dash) checkChoices(card string) {
	d.t.Helper()
	var choices []struct{ Key, Text, HTML string }
	if err := json.Unmarshal([]byte(eval[string](d, d.ctx, `JSON.stringify([...`+card+`.querySelectorAll('[data-testid=choice]')].map((b) => ({key: b.dataset.key, text: b.textContent, html: b.innerHTML})))`)), &choices); err != nil {
		d.t.Fatal(err)
	}
	if len(choices) != 3 || choices[0].Key != "1" || choices[0].Text != "1Yes" || choices[1].Text != "2No, and tell the agent ^[[31mwhy^[[0m" ||
		choices[2].Key != "Escape" || !strings.Contains(choices[2].Text, `<img src=x onerror=`) || strings.Contains(choices[2].HTML, "<img") {
		d.t.Errorf("the choices shown: %+v", choices)
	}
	if title := eval[string](d, d.ctx, `document.title`); strings.Contains(title, "pwned") {
		d.t.Errorf("a choice label ran as HTML: title %q", title)
	}
}

// journal lists, for run id's events on topic, what of each payload
// says: the payload's fields named in order, joined by "/".
func (d *dash) journal(id string, topic wire.Topic, fields ...string) []string {
	d.t.Helper()
	var ev wire.EventList
	d.api(200, "GET", "/runs/"+id+"/events", nil, &ev)
	var out []string
	for _, e := range ev.Events {
		if e.Topic == string(topic) {
			var p map[string]any
			_ = json.Unmarshal(e.Payload, &p)
			var parts []string
			for _, f := range fields {
				parts = append(parts, fmt.Sprint(p[f]))
			}
			out = append(out, strings.Join(parts, "/"))
		}
	}
	return out
}

// TestDashboardAnswerChoices: a run asks a question with choices (its
// hook says needs_input, the detail is what the screen reading gives).
// Its Inbox card shows the question and one button per choice, labels as
// text whatever they hold; a run stopped by a usage limit says when it
// resets, counting down; both fit a phone. Clicking a choice presses its
// key: the program reads it, the delivery shows, the run leaves the
// Inbox, and the journal says the keys cleared the attention.
func TestDashboardAnswerChoices(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	r := d.askWithChoices(t)
	limited := d.rateLimitedRun()
	d.open(d.ctx, "/inbox")
	card := fmt.Sprintf(`document.querySelector('[data-testid=inbox-card][data-run=%q]')`, r.ID)
	d.waitJS(d.ctx, eventually.Medium, "the question and its three choices in the card",
		card+` && `+card+`.querySelector('[data-testid=question]').textContent.startsWith('Do you want to apply the migration?') && `+
			card+`.querySelectorAll('[data-testid=choice]').length === 3`)
	d.checkChoices(card)
	lim := fmt.Sprintf(`document.querySelector('[data-testid=inbox-card][data-run=%q]')`, limited.ID)
	d.waitJS(d.ctx, eventually.Medium, "the usage limit's reset in its card", lim+` && `+lim+`.dataset.why === 'rate_limited' && `+
		lim+`.querySelector('[data-testid=resets]').textContent.startsWith('Waiting for the usage limit, resets at ') && !`+lim+`.querySelector('[data-testid=choice]')`)
	// The countdown to the reset, ticking: 3 h from when the limit was
	// set, to the minute.
	countdown := lim + `.querySelector('[data-testid=countdown]').textContent`
	d.waitJS(d.ctx, eventually.Medium, "the countdown to the reset", `/^in (2 h 5\d|3 h 00) min$/.test(`+countdown+`) && `+
		lim+`.querySelector('[data-testid=resets]').textContent.endsWith(' (' + `+countdown+` + ').')`)
	d.waitJS(d.ctx, eventually.Medium, "the cards' live panes", card+`.querySelector('.thumb').textContent.includes('2. No') && `+lim+`.querySelector('.thumb').textContent.includes('usage limit')`)
	d.shot(d.ctx, "desktop-inbox-question")

	phone := d.phoneTab()
	d.open(phone, "/inbox")
	d.waitJS(phone, eventually.Medium, "the question and the panes on the phone", card+` && `+card+`.querySelectorAll('[data-testid=choice]').length === 3 && `+
		card+`.querySelector('.thumb').textContent.includes('2. No') && `+lim+` && `+lim+`.querySelector('.thumb').textContent.includes('usage limit')`)
	d.noOverflow(phone, "/inbox with a question")
	if w := eval[float64](d, phone, card+`.querySelector('[data-testid=choice]').getBoundingClientRect().width`); w < 200 {
		t.Errorf("a choice is %.0f px wide on the phone, want the card's width", w)
	}
	d.shot(phone, "phone-inbox-question")
	_ = eval[bool](d, phone, `(`+card+`.scrollIntoView({block: 'start'}), true)`)
	d.shot(phone, "phone-inbox-question-card")

	// A choice presses its key.
	d.click(d.ctx, fmt.Sprintf(`[data-testid=inbox-card][data-run=%q] [data-testid=choice][data-key="1"]`, r.ID))
	d.waitJS(d.ctx, eventually.Medium, "the delivery of the choice", `[...document.querySelectorAll('.toast')].some((t) => t.textContent.startsWith('Pressed 1 “Yes”: Delivered'))`)
	d.waitPane(r.ID, "picked 1")
	d.waitRun(r.ID, "to need nothing", func(r wire.Run) bool { return r.Attention == wire.AttentionNone })
	d.waitJS(d.ctx, eventually.Medium, "the answered run out of the inbox", `!`+card+` && `+lim)
	if sources := d.journal(r.ID, wire.TopicRunAttention, "attention", "source"); !slices.Equal(sources, []string{"needs_input/provider-hook", "none/keys"}) {
		t.Errorf("run.attention %q, want needs_input then cleared by the keys", sources)
	}
	for _, id := range []string{r.ID, limited.ID} {
		d.api(202, "POST", "/runs/"+id+"/stop", map[string]any{"force": true}, nil)
	}
}

// TestDashboardAnswerReply: a question without choices is answered from
// the run page's reply box: the reply (a message, pasted: it holds ";")
// and Enter reach the program, the delivery shows there and the reply box
// goes with the question. Then the run asks nothing, and its page's
// message box says something more to it; the journal has both messages,
// confirmed.
func TestDashboardAnswerReply(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	gate := pamtest.ShortDir(t, "pamq-") + "/ask"
	r := d.shellRun("Commit the migration", fmt.Sprintf(`echo 'Commit message?'; while [ ! -e %s ]; do sleep 0.05; done; %s; read line; echo "reply: $line"; exec cat`,
		gate, hookScript(t, "needs-input")))
	d.waitPane(r.ID, "Commit message?")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitRun(r.ID, "to need input", func(r wire.Run) bool { return r.Attention == wire.AttentionNeedsInput })
	d.setAttention(r.ID, wire.AttentionNeedsInput, map[string]any{"source": "screen", "text": "What should the commit message say?",
		"choices": []any{}, "resets_at": nil})
	d.open(d.ctx, "/runs/"+r.ID)
	d.waitJS(d.ctx, eventually.Medium, "the question on the run page", `document.querySelector('[data-testid=answer] [data-testid=question]').textContent === 'What should the commit message say?' && !document.querySelector('[data-testid=answer] [data-testid=choice]')`)
	d.setField(d.ctx, `[data-testid=answer] [data-testid=reply]`, "fix: keys; typed")
	d.waitJS(d.ctx, eventually.Medium, "the pane in the terminal", `window.__pamTerm && window.__pamTerm.buffer.includes('Commit message?')`)
	d.shot(d.ctx, "desktop-run-question")
	d.click(d.ctx, `[data-testid=answer] [data-testid=reply-send]`)
	d.waitJS(d.ctx, eventually.Medium, "the reply's delivery on the run page", `(() => { const e = document.querySelector('[data-testid=delivery]'); return e && e.dataset.delivery === 'confirmed' && e.textContent.startsWith('Reply: Delivered'); })()`)
	d.waitPane(r.ID, "reply: fix: keys; typed")
	d.waitRun(r.ID, "to need nothing", func(r wire.Run) bool { return r.Attention == wire.AttentionNone })
	d.waitJS(d.ctx, eventually.Medium, "the reply box gone with the question, the delivery still shown",
		`!document.querySelector('[data-testid=reply]') && document.querySelector('[data-testid=delivery]')`)

	// Asked nothing: the live run's message box.
	d.waitJS(d.ctx, eventually.Medium, "the message box of a live run", `!!document.querySelector('[data-testid=message-box] [data-testid=message]')`)
	d.setField(d.ctx, `[data-testid=message-box] [data-testid=message]`, "and one more thing")
	d.click(d.ctx, `[data-testid=message-box] [data-testid=message-send]`)
	d.waitJS(d.ctx, 15*time.Second, "the message's delivery", `(() => { const e = document.querySelector('[data-testid=message-delivery]'); return e && e.dataset.delivery === 'confirmed' && e.textContent.startsWith('Message: Delivered'); })()`)
	d.waitJS(d.ctx, eventually.Medium, "the message box emptied", `document.querySelector('[data-testid=message-box] [data-testid=message]').value === ''`)
	d.waitPane(r.ID, "and one more thing")
	if msgs := d.journal(r.ID, wire.TopicRunMessage, "text", "delivery"); !slices.Equal(msgs, []string{"fix: keys; typed/confirmed", "and one more thing/confirmed"}) {
		t.Errorf("run.message %q", msgs)
	}
	d.api(202, "POST", "/runs/"+r.ID+"/stop", map[string]any{"force": true}, nil)
}
