package fakemodel

import "net/http"

// The sizes of the pieces a streamed turn arrives in, as a real model's
// does: its text in deltas of about textPiece bytes, a tool call's input
// JSON in deltas of about inputPiece.
const (
	textPiece  = 16
	inputPiece = 24
)

// turnFor is the turn that answers a request: the next scripted one for
// the agent's conversation, the default text for a CLI's side requests
// (a title, a quota probe), which must never use up the script.
func (s *server) turnFor(agent bool) Turn {
	if agent {
		return s.next()
	}
	return Text(DefaultText)
}

// saysText reports whether the answer has a text block: when the turn
// has text, and also when it has nothing else, since an answer with no
// content at all is not one the CLIs accept.
func (t Turn) saysText() bool { return t.Text != "" || t.Tool == nil }

// blocks puts a turn's two possible blocks, already rendered in an API's
// format, in the order every API sends them: the text, then the tool
// call; each only when the turn has it.
func (t Turn) blocks(text, tool any) []any {
	var out []any
	if t.saysText() {
		out = append(out, text)
	}
	if t.Tool != nil {
		out = append(out, tool)
	}
	return out
}

// turnStream is one API's way of streaming a turn as server-sent events.
// The APIs differ in their events but share the shape that streamTurn
// drives, so a turn is streamed the same way by each.
type turnStream interface {
	// opening announces the response; it is sent before the turn's
	// Delay, so that the CLI shows itself busy while it waits.
	opening()
	// text streams the turn's text as the block at index, in pieces.
	text(index int, pieces []string)
	// toolCall streams the turn's tool call as the block at index, its
	// input JSON in pieces.
	toolCall(index int, pieces []string)
	// closing ends the response.
	closing()
}

// streamTurn streams t: the opening, the turn's delay, its text block
// and its tool call block (see Turn.blocks), the closing.
func streamTurn(r *http.Request, t Turn, st turnStream) {
	st.opening()
	pause(r, t.Delay)
	index := 0
	if t.saysText() {
		st.text(index, chunks(t.Text, textPiece))
		index++
	}
	if t.Tool != nil {
		st.toolCall(index, chunks(inputJSON(t.Tool), inputPiece))
	}
	st.closing()
}
