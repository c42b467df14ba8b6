package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"pam/internal/wire"
)

// ListEvents returns journal events with seq > after in ascending order;
// topic is a glob ("" = all) and limit ≤ 0 leaves the server's default.
func (c *Client) ListEvents(ctx context.Context, after int64, topic string, limit int) ([]wire.Event, error) {
	evs, _, err := c.ListEventsSeq(ctx, after, topic, limit)
	return evs, err
}

// ListEventsSeq is ListEvents that also returns the journal position the
// read saw (its Pam-Event-Seq header; 0 when the server sent none): every
// event up to it is committed, so streaming from it misses nothing.
func (c *Client) ListEventsSeq(ctx context.Context, after int64, topic string, limit int) ([]wire.Event, int64, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if topic != "" {
		q.Set("topic", topic)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out wire.EventList
	h, err := c.do(ctx, http.MethodGet, "/api/v1/events", q, nil, &out)
	if err != nil {
		return nil, 0, err
	}
	seq, _ := strconv.ParseInt(h.Get(wire.HeaderEventSeq), 10, 64)
	return out.Events, seq, nil
}

// maxSSELine bounds one line of an event stream, so a broken server cannot
// make the client buffer without end.
const maxSSELine = 16 << 20

// StreamEvents reads GET /events/stream and calls fn for every event with
// its name (the topic, or "snapshot"), its id (the last id the stream set,
// i.e. the seq) and its data. after > 0 resumes after that seq (sent as
// Last-Event-ID and ?after=); 0 asks for every retained event first
// (?after=0); a negative after streams live only (no cursor: the events
// committed after the connection).
//
// It returns ctx.Err() when ctx ends, fn's error if fn fails, nil when the
// server closes the stream cleanly, and an *Error for a non-2xx answer.
// Reconnecting is the caller's choice: resume with the last id seen.
func (c *Client) StreamEvents(ctx context.Context, after int64, topic string, fn func(name, id string, data []byte) error) error {
	q := url.Values{}
	if topic != "" {
		q.Set("topic", topic)
	}
	if after >= 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/v1/events/stream", q, nil)
	if err != nil {
		return err
	}
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := c.open(req, "text/event-stream")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, fn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// readSSE parses an event stream as the HTML standard describes it: lines
// end in LF, CRLF or CR; "field: value" with one optional space after the
// colon; lines starting with ":" are comments; several data lines join
// with "\n"; a blank line dispatches the event when it has data; the id
// persists until changed; an unterminated last event is dropped. It returns
// nil at EOF and fn's error unwrapped.
func readSSE(r io.Reader, fn func(name, id string, data []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		lastID  string
		name    string
		data    bytes.Buffer
		hasData bool
		first   = true
	)
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if first {
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
			first = false
		}
		if len(line) == 0 {
			if hasData {
				ev := name
				if ev == "" {
					ev = "message"
				}
				if err := fn(ev, lastID, bytes.Clone(data.Bytes())); err != nil {
					return err
				}
			}
			name, hasData = "", false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "id":
			if !bytes.ContainsRune(value, 0) {
				lastID = string(value)
			}
		}
	}
}

// readLine returns the next line without its terminator (LF, CRLF or a
// lone CR). A final line without a terminator is reported as io.EOF, since
// an event cut off by a closed stream is incomplete.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		switch b {
		case '\n':
			return line, nil
		case '\r':
			if next, err := br.Peek(1); err == nil && next[0] == '\n' {
				_, _ = br.ReadByte()
			}
			return line, nil
		}
		if len(line) >= maxSSELine {
			return nil, fmt.Errorf("event stream line longer than %d bytes", maxSSELine)
		}
		line = append(line, b)
	}
}
