package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// TestAttachRoundTripPacerCountsDataFrames (issue 13, the attach round
// trip's p99): the pacer counts the data frames the client gets, not the
// writer's wake-ups. Output that two relay frames brought is written in
// one frame and leaves a wake-up with nothing to send; counted, such
// wake-ups made the pacer hold the next echo for up to 100 ms (the
// benchmark's 50 ms p99). Here the writer is woken with nothing to send
// more often than the pacer allows frames at once, then gets an echo:
// the pacer has recorded that one frame only.
func TestAttachRoundTripPacerCountsDataFrames(t *testing.T) {
	clients := make(chan *attachClient, 1)
	written := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer close(written)
		c := &attachClient{ws: ws, ctrl: make(chan []byte, ctrlQueue), done: make(chan struct{}), outReady: make(chan struct{}, 1)}
		clients <- c
		c.writer()
	}))
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	c := <-clients

	for range 2 * framesPerSecond {
		signal(c.outReady)
		eventually.Wait(t, eventually.Short, "the writer to take the wake-up", func() bool { return len(c.outReady) == 0 })
	}
	c.mu.Lock()
	c.out = append(c.out, "v"...)
	c.mu.Unlock()
	signal(c.outReady)
	_, b, err := ws.Read(ctx)
	if err != nil || !strings.Contains(string(b), `"type":"`+wire.WSData+`"`) {
		t.Fatalf("the echo: %s %v", b, err)
	}
	go func() { // answer the close handshake
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	c.end("", "")
	<-written
	sends := 0
	for _, at := range c.pace.times {
		if !at.IsZero() {
			sends++
		}
	}
	if sends != 1 {
		t.Fatalf("the pacer counted %d frames for the client's 1", sends)
	}
}
