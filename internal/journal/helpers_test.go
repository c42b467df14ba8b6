package journal_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/journal"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestMain fails the package when a goroutine outlives its tests: the
// tailer, the purge loop and every subscriber must end with Run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

// testTimeout bounds every wait of these tests.
const testTimeout = 20 * time.Second

// startHub wires hub.Wake as s.AfterCommit and runs the hub until the test
// ends; the returned stop cancels Run and waits for it to return.
func startHub(t testing.TB, s *store.Store, o journal.Options) (*journal.Hub, func()) {
	t.Helper()
	hub := journal.NewHub(s, o)
	s.AfterCommit = hub.Wake
	return hub, runHub(t, hub)
}

// runHub runs hub.Run in a goroutine owned by the test.
func runHub(t testing.TB, hub *journal.Hub) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hub.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("hub.Run: %v", err)
				}
			case <-time.After(testTimeout):
				t.Errorf("hub.Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// sseHandler is what the HTTP server does in front of ServeSSE: the
// cursor from Last-Event-ID or ?after=, none meaning live only (-1), the
// filter from ?topic=. Tests that want the history ask for ?after=0.
func sseHandler(hub *journal.Hub) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cursor := r.Header.Get("Last-Event-ID")
		if cursor == "" {
			cursor = r.URL.Query().Get("after")
		}
		after := int64(-1)
		if cursor != "" {
			n, err := strconv.ParseInt(cursor, 10, 64)
			if err != nil || n < 0 {
				http.Error(w, "bad cursor", http.StatusBadRequest)
				return
			}
			after = n
		}
		pattern, err := wire.ParseTopicGlob(r.URL.Query().Get("topic"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hub.ServeSSE(w, r, after, pattern)
	})
}

func newServer(t testing.TB, hub *journal.Hub) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(sseHandler(hub))
	t.Cleanup(srv.Close)
	return srv
}

// sseFrame is one parsed SSE event.
type sseFrame struct {
	ID    int64
	Event string
	Data  string
}

// sseStream is a client connection to the event stream.
type sseStream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// connect opens the stream at url/query with an optional Last-Event-ID.
// Reads fail once testTimeout has passed, so a missing event fails the
// test instead of hanging it; benchmarks get longer.
func connect(t testing.TB, url, lastEventID string) *sseStream {
	t.Helper()
	timeout := testTimeout
	if _, ok := t.(*testing.B); ok {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("connect %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		cancel()
		t.Fatalf("connect %s: %s %q", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	st := &sseStream{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(st.Close)
	return st
}

// Close disconnects.
func (st *sseStream) Close() {
	st.cancel()
	st.resp.Body.Close()
}

// next reads one event, skipping comment-only blocks such as keepalives.
func (st *sseStream) next() (sseFrame, error) {
	var f sseFrame
	seen := false
	for {
		line, err := st.r.ReadString('\n')
		if err != nil {
			return f, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return f, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			f.ID, err = strconv.ParseInt(line[4:], 10, 64)
			if err != nil {
				return f, fmt.Errorf("bad id line %q", line)
			}
			seen = true
		case strings.HasPrefix(line, "event: "):
			f.Event, seen = line[7:], true
		case strings.HasPrefix(line, "data: "):
			if f.Data != "" {
				return f, errors.New("more than one data line")
			}
			f.Data, seen = line[6:], true
		default:
			return f, fmt.Errorf("unexpected line %q", line)
		}
	}
}

// read reads n events or fails the test.
func (st *sseStream) read(t testing.TB, n int) []sseFrame {
	t.Helper()
	out := make([]sseFrame, 0, n)
	for len(out) < n {
		f, err := st.next()
		if err != nil {
			t.Fatalf("read event %d of %d: %v", len(out)+1, n, err)
		}
		out = append(out, f)
	}
	return out
}

// journal1 appends evs in one transaction. Tests compare what subscribers
// got with what the events table holds rather than guessing seqs.
func journal1(t testing.TB, s *store.Store, evs ...store.NewEvent) {
	t.Helper()
	ctx := context.Background()
	if err := s.InTx(ctx, func(tx *store.Tx) error { return tx.Journal(ctx, evs...) }); err != nil {
		t.Fatalf("journal: %v", err)
	}
}

// journalN appends n events of topic, one transaction each.
func journalN(t testing.TB, s *store.Store, topic string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		journal1(t, s, store.NewEvent{Topic: wire.Topic(topic), Payload: map[string]int{"i": i}})
	}
}

// stored returns the events after seq matching glob, from the database.
func stored(t testing.TB, s *store.Store, after int64, glob string) []wire.Event {
	t.Helper()
	pattern, err := wire.ParseTopicGlob(glob)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.EventsAfter(context.Background(), after, math.MaxInt64, pattern, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// lastSeq is the journal's head.
func lastSeq(t testing.TB, s *store.Store) int64 {
	t.Helper()
	n, err := s.SafeSeq(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkFrames fails unless got is exactly want: same seqs, same order,
// topics as event names and the event JSON as data.
func checkFrames(t testing.TB, got []sseFrame, want []wire.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events %v, want %d %v", len(got), frameIDs(got), len(want), eventSeqs(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.Seq || g.Event != w.Topic {
			t.Fatalf("event %d: got id %d %q, want %d %q (got %v)", i, g.ID, g.Event, w.Seq, w.Topic, frameIDs(got))
		}
		if !strings.Contains(g.Data, fmt.Sprintf(`"seq":%d,"topic":%q`, w.Seq, w.Topic)) {
			t.Fatalf("event %d: data %s does not carry seq %d", i, g.Data, w.Seq)
		}
	}
}

func frameIDs(fs []sseFrame) []int64 {
	out := make([]int64, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

func eventSeqs(evs []wire.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}
