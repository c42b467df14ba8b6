package journal

import (
	"net/http"
	"sync"
	"time"

	"pam/internal/wire"
)

// subscriber is one SSE connection as the hub sees it: a topic filter and
// a bounded queue of frames its handler has not taken yet.
type subscriber struct {
	pattern *wire.TopicPattern
	rc      *http.ResponseController
	remote  string

	wake chan struct{} // capacity 1: frames were queued
	done chan struct{} // closed when the hub ends the subscription

	mu      sync.Mutex
	queue   []frame
	pending int  // bytes in queue
	ended   bool // done is closed
	exited  bool // the handler has returned: rc must not be touched
}

func newSubscriber(pattern *wire.TopicPattern, rc *http.ResponseController, remote string) *subscriber {
	return &subscriber{
		pattern: pattern,
		rc:      rc,
		remote:  remote,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
}

// push queues the frames matching the pattern. It reports false, and
// frees the queue, when they would take it past limit bytes: the caller then
// drops the subscriber. A single frame is always accepted into an empty
// queue, so one oversized event cannot disconnect every subscriber.
func (s *subscriber) push(frames []frame, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	queued := false
	for _, f := range frames {
		if !s.pattern.Match(f.topic) {
			continue
		}
		if s.pending > 0 && s.pending+len(f.data) > limit {
			s.queue, s.pending = nil, 0
			return false
		}
		s.queue = append(s.queue, f)
		s.pending += len(f.data)
		queued = true
	}
	if queued {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take empties the queue and returns what it held, oldest first.
func (s *subscriber) take() []frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.pending = nil, 0
	return q
}

// end closes done so the handler returns. A handler may be blocked writing
// to a client that stopped reading, so end also moves the connection's
// write deadline to now: the blocked Write fails, and so does the server's
// final flush, which closes the connection instead of keeping it alive.
func (s *subscriber) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	close(s.done)
	if !s.exited {
		// Not every ResponseWriter supports deadlines (e.g. a recorder);
		// those handlers still return through done.
		_ = s.rc.SetWriteDeadline(time.Now())
	}
}

// exit records that the handler returned. After it, end leaves the
// connection alone: the server may already be serving its next request.
func (s *subscriber) exit() {
	s.mu.Lock()
	s.exited = true
	s.mu.Unlock()
}
