package wire

import "context"

// Handler is one entry of a receiver's table of frame handlers: a frame
// type and what to do with a frame of it. S is the receiver's own state
// (a connection, a session).
type Handler[S any] struct {
	typ string
	fn  func(S, context.Context, Frame)
}

// On makes the entry of h, a handler of one frame type, which it names.
func On[S any, F Frame](h func(S, context.Context, F)) Handler[S] {
	var zero F
	return Handler[S]{typ: zero.Type(), fn: func(s S, ctx context.Context, f Frame) { h(s, ctx, f.(F)) }}
}

// Handlers maps frame types to their handlers: one place to see what a
// receiver understands.
type Handlers[S any] map[string]func(S, context.Context, Frame)

// NewHandlers builds a table; a type handled twice is a bug and panics.
func NewHandlers[S any](hs ...Handler[S]) Handlers[S] {
	t := Handlers[S]{}
	for _, h := range hs {
		if _, dup := t[h.typ]; dup {
			panic("frame type " + h.typ + " handled twice")
		}
		t[h.typ] = h.fn
	}
	return t
}

// Handle runs f's handler; false when the table has none for its type.
func (t Handlers[S]) Handle(s S, ctx context.Context, f Frame) bool {
	h, ok := t[f.Type()]
	if ok {
		h(s, ctx, f)
	}
	return ok
}
