package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"pam/internal/wire"
)

// keepaliveEvery is how long a stream may stay silent before a comment
// line is sent, so proxies do not close an idle but healthy connection.
const keepaliveEvery = 15 * time.Second

// errWrite marks failures to write to the client, as opposed to failures
// to read the journal.
var errWrite = errors.New("write to subscriber")

// frame is one event encoded for SSE. Its data is encoded once by the
// tailer and shared, read-only, by every subscriber that receives it.
type frame struct {
	seq   int64
	topic string
	data  []byte
}

// encodeEvent renders ev as `id`, `event` and a one-line JSON `data`.
func encodeEvent(ev wire.Event) (frame, error) {
	js, err := json.Marshal(ev)
	if err != nil {
		return frame{}, err
	}
	b := make([]byte, 0, len(js)+len(ev.Topic)+40)
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Topic...)
	b = append(b, "\ndata: "...)
	b = append(b, js...)
	b = append(b, "\n\n"...)
	return frame{seq: ev.Seq, topic: ev.Topic, data: b}, nil
}

// ServeSSE streams every event with seq > after whose topic matches
// pattern (nil = all), then the live ones, until the request ends, the
// client falls too far behind, or the hub stops. The caller has parsed
// after from Last-Event-ID or ?after= and the pattern from ?topic=; a
// negative after (no cursor) streams live only: the events committed
// after the connection. Their start is the journal's safe seq S, read
// after registering: every event at or below S had committed (or
// aborted) when S was read, so none of them is live, and every event
// above S reaches the queue, since the hub had published no further than
// S when the subscriber registered. Queued events up to S, committed
// before the connection but published after it, are skipped.
//
// The subscriber registers with the hub before anything is read from the
// database, getting the hub's published position P: events after P arrive
// through its queue, events in (after, P] are read from the database, and
// queued frames already covered by that backfill are skipped, so there is
// neither a gap nor a duplicate.
//
// It waits until Run has read the journal's head, and answers 503
// unavailable once Run has returned. w must support flushing (directly or
// through Unwrap, as http.ResponseController expects), or the stream ends
// after its headers.
func (h *Hub) ServeSSE(w http.ResponseWriter, r *http.Request, after int64, pattern *wire.TopicPattern) {
	ctx := r.Context()
	select {
	case <-h.ready:
	case <-h.stopped:
	case <-ctx.Done():
		return
	}
	// Without a cursor the stream is live only: what committed before it
	// connected is skipped. That horizon is read before the subscriber
	// registers: read after, it could pass an event committed once the
	// subscriber was there, which the queue then carries and the stream
	// would skip as already sent.
	var live int64
	if after < 0 {
		var err error
		if live, err = h.store.SafeSeq(ctx); err != nil {
			if ctx.Err() == nil {
				h.log.Warn("journal: live subscriber", "remote", r.RemoteAddr, "err", err)
				writeUnavailable(w)
			}
			return
		}
	}
	sub := newSubscriber(pattern, http.NewResponseController(w), r.RemoteAddr)
	// A server-wide WriteTimeout would cut every stream after a while; the
	// pending bound is what limits a stream instead. Cleared before the
	// hub knows sub, so it cannot undo a drop's deadline.
	_ = sub.rc.SetWriteDeadline(time.Time{})
	published, ok := h.register(sub)
	if !ok {
		writeUnavailable(w)
		return
	}
	defer h.unregister(sub)
	if h.afterRegister != nil {
		h.afterRegister()
	}

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := sub.rc.Flush(); err != nil {
		return
	}
	var sent int64
	var err error
	if after >= 0 {
		sent, err = h.backfill(ctx, w, sub, after, published)
	} else {
		sent = max(live, published)
	}
	if err != nil {
		// A client that went away or was dropped is not worth a log line.
		if ctx.Err() == nil && !errors.Is(err, errWrite) {
			h.log.Warn("journal: backfill subscriber", "remote", sub.remote, "err", err)
		}
		return
	}
	h.stream(ctx, w, sub, sent)
}

// backfill writes the matching events after the cursor that the
// subscriber's queue will not carry, i.e. up to at least published, and
// returns the seq it covered. If events after the cursor were purged it
// first sends a snapshot of the current state and continues from the purge
// horizon. The horizon is checked after each page is read, so a purge
// racing with the read cannot leave an unnoticed hole.
func (h *Hub) backfill(ctx context.Context, w http.ResponseWriter, sub *subscriber, cursor, published int64) (int64, error) {
	for {
		evs, err := h.store.EventsAfter(ctx, cursor, published, sub.pattern, pageSize)
		if err != nil {
			return 0, fmt.Errorf("read events after %d: %w", cursor, err)
		}
		purged, err := h.store.PurgedThrough(ctx)
		if err != nil {
			return 0, fmt.Errorf("read purge horizon: %w", err)
		}
		if cursor < purged {
			if err := h.writeSnapshot(ctx, w, sub, purged); err != nil {
				return 0, err
			}
			cursor = purged
			continue
		}
		for _, ev := range evs {
			f, err := encodeEvent(ev)
			if err != nil {
				return 0, fmt.Errorf("encode event %d: %w", ev.Seq, err)
			}
			if _, err := w.Write(f.data); err != nil {
				return 0, fmt.Errorf("%w: %v", errWrite, err)
			}
			cursor = ev.Seq
		}
		if err := sub.rc.Flush(); err != nil {
			return 0, fmt.Errorf("%w: %v", errWrite, err)
		}
		// A short page holds every matching event up to published.
		if len(evs) < pageSize || cursor >= published {
			return cursor, nil
		}
	}
}

// writeSnapshot sends the state a subscriber can no longer rebuild from
// events, with the purge horizon as its id so a reconnect resumes there.
func (h *Hub) writeSnapshot(ctx context.Context, w http.ResponseWriter, sub *subscriber, purged int64) error {
	snap, err := h.store.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	js, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	if _, err := fmt.Fprintf(w, "id: %d\nevent: snapshot\ndata: %s\n\n", purged, js); err != nil {
		return fmt.Errorf("%w: %v", errWrite, err)
	}
	if err := sub.rc.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errWrite, err)
	}
	return nil
}

// stream writes queued frames newer than sent until the request ends or
// the hub ends the subscription.
func (h *Hub) stream(ctx context.Context, w http.ResponseWriter, sub *subscriber, sent int64) {
	keepalive := time.NewTimer(keepaliveEvery)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.done:
			return
		case <-keepalive.C:
			if _, err := w.Write([]byte(": keepalive\n\n")); err != nil {
				return
			}
		case <-sub.wake:
			for _, f := range sub.take() {
				if f.seq <= sent {
					continue
				}
				if _, err := w.Write(f.data); err != nil {
					return
				}
				sent = f.seq
			}
		}
		if err := sub.rc.Flush(); err != nil {
			return
		}
		keepalive.Reset(keepaliveEvery)
	}
}

// writeUnavailable answers a subscriber that arrives after the hub
// stopped, with the error envelope of the REST API.
func writeUnavailable(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(wire.Envelope{
		Error: wire.Errorf(wire.CodeUnavailable, "event stream is shutting down"),
	})
}
