package holder

import "sync"

// inputQueue holds input on its way to the program, bounded in bytes. A
// reader pushing past the bound waits for room (only that reader's own
// socket is held up); the output path never touches it.
type inputQueue struct {
	mu     sync.Mutex
	q      [][]byte
	size   int
	limit  int
	closed bool
	room   chan struct{} // cap 1: bytes were taken
	ready  chan struct{} // cap 1: bytes were added, or closed
}

func newInputQueue(limit int) *inputQueue {
	return &inputQueue{limit: limit, room: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
}

// push queues b, waiting for room while the queue is full; it gives up
// (false) when quit closes or the queue is closed. A chunk larger than
// the whole bound is taken when the queue is empty.
func (iq *inputQueue) push(b []byte, quit <-chan struct{}) bool {
	for {
		iq.mu.Lock()
		if iq.closed {
			iq.mu.Unlock()
			return false
		}
		if iq.size == 0 || iq.size+len(b) <= iq.limit {
			iq.q = append(iq.q, b)
			iq.size += len(b)
			iq.mu.Unlock()
			poke(iq.ready)
			return true
		}
		iq.mu.Unlock()
		select {
		case <-iq.room:
		case <-quit:
			return false
		}
	}
}

// pop takes the oldest chunk, waiting for one; false once closed.
func (iq *inputQueue) pop() ([]byte, bool) {
	for {
		iq.mu.Lock()
		if iq.closed {
			iq.mu.Unlock()
			return nil, false
		}
		if len(iq.q) > 0 {
			b := iq.q[0]
			iq.q[0] = nil
			iq.q = iq.q[1:]
			iq.size -= len(b)
			iq.mu.Unlock()
			poke(iq.room)
			return b, true
		}
		iq.mu.Unlock()
		<-iq.ready
	}
}

// close drops what is queued and wakes every waiter.
func (iq *inputQueue) close() {
	iq.mu.Lock()
	iq.closed = true
	iq.q = nil
	iq.mu.Unlock()
	poke(iq.ready)
	poke(iq.room)
}
