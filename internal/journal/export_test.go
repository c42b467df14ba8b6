package journal

// SetAfterRegister makes ServeSSE call f right after a subscriber
// registered, before it reads anything: a test commits there what must
// count as after the connection.
func SetAfterRegister(h *Hub, f func()) { h.afterRegister = f }

// Published is the seq of the last event the hub handed to subscribers.
func (h *Hub) Published() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.published
}
