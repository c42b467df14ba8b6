package journal_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pam/internal/eventually"

	"pam/internal/journal"
	"pam/internal/store"
	"pam/internal/store/storetest"
)

// smallBufListener shrinks the send buffer of accepted connections, so a
// client that stops reading blocks the server's writes after a few KiB of
// kernel buffering instead of several MiB.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

func TestSlowSubscriberDropped(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxPending int
	}{
		{"64KiB", 64 << 10},
		{"default", 0}, // 1 MiB
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testSlowSubscriber(t, tc.maxPending)
		})
	}
}

// testSlowSubscriber journals ~4 KiB events while one client never reads
// its response: it must be disconnected alone, while a client that reads
// receives every event.
func testSlowSubscriber(t *testing.T, maxPending int) {
	s := storetest.New(t)
	hub, _ := startHub(t, s, journal.Options{PollInterval: time.Hour, MaxPending: maxPending})
	srv := httptest.NewUnstartedServer(sseHandler(hub))
	srv.Listener = smallBufListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	start := lastSeq(t, s)

	slow, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	_ = slow.(*net.TCPConn).SetReadBuffer(8 << 10)
	if _, err := fmt.Fprintf(slow, "GET /?after=%d HTTP/1.1\r\nHost: pam\r\n\r\n", start); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, testTimeout, "the slow subscriber", func() bool { return hub.Subscribers() == 1 })

	fast := connect(t, srv.URL+"?after="+itoa(start), "")
	var received atomic.Int64
	frames := make(chan []sseFrame, 1)
	go func() {
		var got []sseFrame
		defer func() { frames <- got }()
		for {
			f, err := fast.next()
			if err != nil {
				return
			}
			got = append(got, f)
			received.Add(1)
		}
	}()

	blob := strings.Repeat("x", 4096)
	sent := int64(0)
	deadline := time.Now().Add(testTimeout)
	for hub.Dropped() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slow subscriber not dropped after %d events (%d subscribers)", sent, hub.Subscribers())
		}
		// Pace the writer by the fast client so only the slow one lags.
		eventually.Wait(t, testTimeout, "the fast subscriber to keep up", func() bool { return received.Load() >= sent-8 })
		journal1(t, s, store.NewEvent{Topic: "run.progress", Payload: map[string]any{"i": sent, "blob": blob}})
		sent++
	}
	if n := hub.Subscribers(); n != 1 || hub.Dropped() != 1 {
		t.Fatalf("after the drop: %d subscribers, %d dropped; want 1 and 1", n, hub.Dropped())
	}
	t.Logf("slow subscriber dropped after %d events of ~4 KiB", sent)

	journalN(t, s, "run.progress", 5)
	sent += 5
	eventually.Wait(t, testTimeout, "the fast subscriber to get every event", func() bool { return received.Load() >= sent })
	fast.Close()
	checkFrames(t, <-frames, stored(t, s, start, ""))

	// The server closed the slow connection: draining it ends, it does not
	// run into our read deadline.
	_ = slow.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := io.Copy(io.Discard, slow); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("slow connection still open: %v", err)
		}
	}
}
