package worker

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/vt"

	"pam/internal/holder"
	"pam/internal/tmux"
)

// The pty executor's screen models: what Capture answers from, fed by
// the worker's reader connection to each holder.

// screen is the model of the holder called name, reading it when it is
// not read yet (redraw asks the program to repaint, for a reader that
// did not see it start).
func (e *ptyExecutor) screen(name string, redraw bool) (*screen, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sc := e.screens[name]; sc != nil && !sc.ended() {
		return sc, nil
	}
	n, err := tmux.ParseSessionName(name)
	if err != nil {
		return nil, err
	}
	// Skip: past the holder's pending limit the model loses output, not
	// its connection, and resynchronizes.
	c, err := e.dial(n, holder.Hello{Redraw: redraw, Skip: true})
	if err != nil {
		return nil, err
	}
	sc := newScreen(c)
	if e.modelBudget > 0 {
		sc.budget = e.modelBudget
	}
	e.screens[name] = sc
	go func() {
		sc.read()
		e.mu.Lock()
		if e.screens[name] == sc {
			delete(e.screens, name)
		}
		e.mu.Unlock()
	}()
	return sc, nil
}

// screen is the worker's model of one holder's terminal.
//
// The model is a VT emulator (github.com/charmbracelet/x/vt), which
// takes scrolling output at only a few MB/s: fed every byte of a flood
// it would hold a core per flooding session. So the connection is read
// at once into a queue, and the model takes at most modelBudget bytes
// per modelWindow; when more waited, it takes only the newest
// modelBudget (from a line start), on a fresh emulator, and asks the
// program to repaint (a full-screen program's screen is not in that
// tail). A capture lags a flood by at most a window or so; what is
// skipped is output that scrolled past the visible screen anyway. The
// holder too drops output rather than release the model's connection
// when it falls behind (Hello.Skip), with the same resynchronization.
type screen struct {
	c *holder.Conn

	mu   sync.Mutex // the model: term, rows, cols
	term *vt.Emulator

	qmu sync.Mutex // the queue and the paste tracking
	q   []modelInput
	qn  int // bytes in q
	// paste: the program asked for bracketed paste (CSI ?2004h); tail
	// keeps the end of the last chunk, for a sequence cut in two. Kept
	// from every byte read, skipped or not.
	paste bool
	// appCursor: the program asked for application cursor keys (CSI
	// ?1h), tracked as paste is.
	appCursor bool
	tail      []byte
	wake      chan struct{}
	eof       bool // the connection ended; the queue is the last input
	resync    bool // the holder skipped output: a fresh model, a redraw
	done      chan struct{}
	resets    int // fresh emulators after skipping (for tests)
	budget    int // modelBudget (a benchmark's baseline lifts it)
}

// modelInput is output bytes or, with data nil, a size change.
type modelInput struct {
	data       []byte
	rows, cols int
}

const (
	// modelBudget is what the model parses at most per modelWindow:
	// 32 KiB per 100 ms is ≈ 10 % of a core for scrolling output on
	// this emulator, far above what an agent's interface writes.
	modelBudget = 32 << 10
	modelWindow = 100 * time.Millisecond
)

func newScreen(c *holder.Conn) *screen {
	rows, cols := c.Info.Rows, c.Info.Cols
	if rows <= 0 || cols <= 0 {
		rows, cols = tmux.Height, tmux.Width
	}
	return &screen{c: c, term: newModel(rows, cols), wake: make(chan struct{}, 1), done: make(chan struct{}), budget: modelBudget}
}

// newModel is an emulator of rows×cols whose answers are dropped.
func newModel(rows, cols int) *vt.Emulator {
	t := vt.NewEmulator(cols, rows)
	// Captures are the visible screen: a scrollback (10,000 lines by
	// default, and 0 means the default) only costs memory and, on every
	// scrolled line, a copy.
	t.SetScrollbackSize(1)
	// The emulator answers the program's queries on its input side;
	// those answers are the attached terminal's to give, not the
	// model's: drained and dropped, or the emulator would block.
	go func() { _, _ = io.Copy(io.Discard, t) }()
	return t
}

// closeModel ends the drain of an emulator's answers (Close would race
// with that drain on the emulator's unguarded closed flag).
func closeModel(t *vt.Emulator) {
	if pw, ok := t.InputPipe().(*io.PipeWriter); ok {
		_ = pw.CloseWithError(io.EOF)
	}
}

// read reads the holder until the connection ends, queueing for the
// model, which parse feeds.
func (s *screen) read() {
	parsed := make(chan struct{})
	go func() { defer close(parsed); s.parse() }()
	defer func() {
		<-parsed
		s.c.Close()
		s.mu.Lock()
		closeModel(s.term)
		s.mu.Unlock()
		close(s.done)
	}()
	defer func() {
		s.qmu.Lock()
		s.eof = true
		s.qmu.Unlock()
		poke(s.wake)
	}()
	for {
		f, err := s.c.Next()
		if err != nil {
			return
		}
		switch f.Type {
		case holder.FrameOutput:
			s.qmu.Lock()
			s.trackPaste(f.Payload)
			s.q = append(s.q, modelInput{data: f.Payload})
			s.qn += len(f.Payload)
			s.qmu.Unlock()
			poke(s.wake)
		case holder.FrameSize:
			if rows, cols, err := holder.ParseSize(f.Payload); err == nil {
				s.qmu.Lock()
				s.q = append(s.q, modelInput{rows: rows, cols: cols})
				s.qmu.Unlock()
				poke(s.wake)
			}
		case holder.FrameSkipped:
			// What is queued precedes the gap: the model starts again
			// after it (a size frame follows).
			s.qmu.Lock()
			s.q, s.qn, s.resync = nil, 0, true
			s.qmu.Unlock()
			poke(s.wake)
		case holder.FrameExit:
			return
		}
	}
}

// parse feeds the model from the queue within its budget, until the
// connection ended and the queue is empty.
func (s *screen) parse() {
	// A repaint is asked for at most once a second (each is a size
	// change the program sees); one owed is asked for when the flood
	// ends.
	var lastRedraw time.Time
	owed := false
	for {
		<-s.wake
		for {
			in, skipped, last := s.take()
			if len(in) == 0 && !skipped {
				if last {
					return
				}
				if owed { // the flood is over
					_ = s.c.Control(holder.ControlRedraw)
					lastRedraw, owed = time.Now(), false
				}
				break
			}
			n := s.apply(in, skipped)
			owed = owed || skipped
			if owed && time.Since(lastRedraw) >= time.Second {
				_ = s.c.Control(holder.ControlRedraw)
				lastRedraw, owed = time.Now(), false
			}
			if n >= s.budget {
				// Flooded: the next window's worth waits for it.
				time.Sleep(modelWindow)
			}
		}
	}
}

// take empties the queue: all of it when it holds at most s.budget
// bytes, else the last size change and the newest s.budget bytes from a
// line start (skipped). last: the connection ended.
func (s *screen) take() (in []modelInput, skipped, last bool) {
	s.qmu.Lock()
	in, s.q = s.q, nil
	n := s.qn
	s.qn = 0
	last = s.eof
	resync := s.resync
	s.resync = false
	s.qmu.Unlock()
	if n <= s.budget {
		return in, resync, last
	}
	// The newest chunks that make up the budget, newest first.
	var keep [][]byte
	size, rows, cols := 0, 0, 0
	for i := len(in) - 1; i >= 0; i-- {
		m := in[i]
		if m.data == nil {
			if rows == 0 {
				rows, cols = m.rows, m.cols
			}
			continue
		}
		if size < s.budget {
			d := m.data[max(0, len(m.data)-(s.budget-size)):]
			keep = append(keep, d)
			size += len(d)
		}
	}
	data := make([]byte, 0, size)
	for i := len(keep) - 1; i >= 0; i-- {
		data = append(data, keep[i]...)
	}
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[i+1:]
	}
	out := make([]modelInput, 0, 2)
	if rows > 0 {
		out = append(out, modelInput{rows: rows, cols: cols})
	}
	return append(out, modelInput{data: data}), true, last
}

// apply writes in to the model (on a fresh one when skipped) and
// returns how many output bytes it parsed.
func (s *screen) apply(in []modelInput, skipped bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if skipped {
		rows, cols := s.term.Height(), s.term.Width()
		closeModel(s.term)
		s.term = newModel(rows, cols)
		s.resets++
	}
	n := 0
	for _, m := range in {
		if m.data == nil {
			s.term.Resize(m.cols, m.rows)
			continue
		}
		_, _ = s.term.Write(m.data)
		n += len(m.data)
	}
	return n
}

// trackPaste follows the input modes keys depend on (s.qmu held):
// bracketed paste and application cursor keys.
func (s *screen) trackPaste(p []byte) {
	const keep = len("\x1b[?2004h") - 1
	s.paste = trackMode(s.paste, s.tail, p, "\x1b[?2004h", "\x1b[?2004l")
	s.appCursor = trackMode(s.appCursor, s.tail, p, "\x1b[?1h", "\x1b[?1l")
	if len(p) >= keep {
		s.tail = append(s.tail[:0], p[len(p)-keep:]...)
	} else {
		s.tail = append(s.tail, p...)
		s.tail = s.tail[max(0, len(s.tail)-keep):]
	}
}

// trackMode is a mode after the output p, switched by the sequences on
// and off, without copying p: the last switch in p decides, else one cut
// in two between the previous chunk's tail and p's head.
func trackMode(cur bool, tail, p []byte, on, off string) bool {
	i, j := bytes.LastIndex(p, []byte(on)), bytes.LastIndex(p, []byte(off))
	if i < 0 && j < 0 {
		keep := len(on) - 1
		seam := append(append(make([]byte, 0, len(tail)+keep), tail...), p[:min(len(p), keep)]...)
		i, j = bytes.LastIndex(seam, []byte(on)), bytes.LastIndex(seam, []byte(off))
	}
	if i >= 0 || j >= 0 {
		return i > j
	}
	return cur
}

func (s *screen) modes() termModes {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return termModes{paste: s.paste, appCursor: s.appCursor}
}

func (s *screen) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// render is the screen as capture-pane -p -e gives it: one line per
// row, colour as SGR escapes, each line ending in a newline.
func (s *screen) render() string {
	s.mu.Lock()
	out := s.term.Render()
	s.mu.Unlock()
	out = strings.ReplaceAll(out, "\r\n", "\n")
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out
}
