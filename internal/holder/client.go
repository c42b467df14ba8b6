package holder

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// dialTimeout bounds connecting to a holder's socket and reading its
// info frame.
const dialTimeout = 3 * time.Second

// Conn is a reader's connection to a holder.
type Conn struct {
	c   net.Conn
	br  *bufio.Reader
	wmu sync.Mutex
	// Info is the holder's answer to the hello.
	Info Info
}

// Dial connects to the holder called name as a reader: it sends hello
// and reads the info frame. A write-mode hello is needed for Input to
// reach the program.
func Dial(dir, name string, hello Hello) (*Conn, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("holder name %q: want pam-<8 lowercase hex>", name)
	}
	c, err := net.DialTimeout("unix", SocketPath(dir, name), dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("attach to holder %s: %w", name, err)
	}
	b, _ := json.Marshal(hello)
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	if err := WriteFrame(c, FrameHello, b); err != nil {
		c.Close()
		return nil, fmt.Errorf("attach to holder %s: hello: %w", name, err)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	f, err := ReadFrame(br)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("attach to holder %s: %w", name, err)
	}
	if f.Type != FrameInfo {
		c.Close()
		return nil, fmt.Errorf("attach to holder %s: %w: first frame %q", name, ErrFrame, byte(f.Type))
	}
	var info Info
	if err := json.Unmarshal(f.Payload, &info); err != nil {
		c.Close()
		return nil, fmt.Errorf("attach to holder %s: info: %w", name, err)
	}
	_ = c.SetDeadline(time.Time{})
	return &Conn{c: c, br: br, Info: info}, nil
}

// Next reads the next frame from the holder: output, size or exit.
func (c *Conn) Next() (Frame, error) { return ReadFrame(c.br) }

// Input sends bytes for the program, in frames of at most MaxPayload.
func (c *Conn) Input(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(b) > 0 {
		n := min(len(b), MaxPayload)
		if err := WriteFrame(c.c, FrameInput, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Resize asks for a new PTY size.
func (c *Conn) Resize(rows, cols int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return WriteFrame(c.c, FrameResize, SizePayload(rows, cols))
}

// Control sends a control request (ControlStop, ControlKill,
// ControlRedraw).
func (c *Conn) Control(req string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return WriteFrame(c.c, FrameControl, []byte(req))
}

// Close leaves: the program is never signalled by a reader leaving.
func (c *Conn) Close() error { return c.c.Close() }

// Alive reports whether the holder called name counts as live: its note
// names a process that exists and its socket accepts a connection.
// Either alone proves nothing (pids are reused, socket files outlive
// their listeners).
func Alive(dir, name string) (Note, bool) {
	n, err := ReadNote(dir, name)
	if err != nil || n.PID <= 0 {
		return n, false
	}
	if err := syscall.Kill(n.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return n, false
	}
	c, err := net.DialTimeout("unix", SocketPath(dir, name), dialTimeout)
	if err != nil {
		return n, false
	}
	c.Close()
	return n, true
}

// List returns the notes of the live holders in dir, by name. Files a
// dead holder left behind (its socket and note) are removed when its
// name lock is free, which proves no holder has it, not even one that is
// starting.
func List(dir string) ([]Note, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list holders: %w", err)
	}
	var out []Note
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".sock")
		if !ok || !ValidName(name) {
			continue
		}
		if n, ok := Alive(dir, name); ok {
			out = append(out, n)
			continue
		}
		Sweep(dir, name)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// sweeping is what Sweep writes in a name lock it holds for a moment.
const sweeping = "sweeping a dead holder's files"

// Sweep removes the socket and note of a dead holder, if its name lock
// is free (no holder, live or starting, has the name). It reports
// whether it did.
func Sweep(dir, name string) bool {
	if !ValidName(name) {
		return false
	}
	l, err := tryFlock(lockPath(dir, name), sweeping)
	if err != nil {
		return false
	}
	defer l.release()
	_ = os.Remove(SocketPath(dir, name))
	_ = os.Remove(NotePath(dir, name))
	return true
}
