package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// marker starts the title the generator writes: "lt-" and the time the
// PATCH was sent, in Unix nanoseconds, which every subscriber reads back
// from the work_item.updated event to time its delivery.
const marker = `"title":"lt-`

// subscriber is one SSE client of /api/v1/events/stream: it records
// every seq it receives, in order, and the delivery latency of the
// generator's events. A dropped stream is resumed after the last seq
// seen, as any client does (Last-Event-ID).
type subscriber struct {
	base, token string
	hc          *http.Client

	seqs       []int64
	lat        []int32 // µs, the generator's events
	reconnects int

	last      atomic.Int64
	connected atomic.Bool
	refused   atomic.Pointer[error] // the refusal that ended it
}

// err is the refusal that ended the subscriber, if any.
func (s *subscriber) err() error {
	if e := s.refused.Load(); e != nil {
		return *e
	}
	return nil
}

// run streams until ctx ends or the server refuses the stream.
func (s *subscriber) run(ctx context.Context, after int64) {
	for ctx.Err() == nil {
		err := s.stream(ctx, after)
		if ctx.Err() != nil {
			return
		}
		var we *wire.Error
		if errors.As(err, &we) {
			s.refused.Store(&err)
			return
		}
		s.reconnects++
		after = s.last.Load()
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stream reads one connection of the stream: "id:", "event:" and "data:"
// lines, an event ending at a blank line.
func (s *subscriber) stream(ctx context.Context, after int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/api/v1/events/stream?after="+strconv.FormatInt(after, 10), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &wire.Error{Code: wire.CodeInternal, Message: fmt.Sprintf("event stream: %s %s", resp.Status, bytes.TrimSpace(b))}
	}
	s.connected.Store(true)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var (
		id      int64 = -1
		topic   []byte
		hasData bool
		long    []byte
	)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if err != nil {
			return err
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if hasData && id >= 0 {
				s.seqs = append(s.seqs, id)
				s.last.Store(id)
			}
			hasData = false
		case bytes.HasPrefix(line, []byte("id: ")):
			id, _ = strconv.ParseInt(string(line[4:]), 10, 64)
		case bytes.HasPrefix(line, []byte("event: ")):
			topic = append(topic[:0], line[7:]...)
		case bytes.HasPrefix(line, []byte("data: ")):
			hasData = true
			if string(topic) == string(wire.TopicWorkItemUpdated) {
				if sent, ok := sentAt(line); ok {
					s.lat = append(s.lat, int32(min(time.Since(time.Unix(0, sent)).Microseconds(), 1<<31-1)))
				}
			}
		}
	}
}

// sentAt reads the generator's timestamp out of an event's data.
func sentAt(data []byte) (int64, bool) {
	i := bytes.Index(data, []byte(marker))
	if i < 0 {
		return 0, false
	}
	rest := data[i+len(marker):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return n, err == nil
}

// generator writes events at a steady rate through a cheap API call: a
// PATCH of a work item's title (work_item.updated), one work item per
// sender so that no two wait for the same row lock.
type generator struct {
	api   *apiclient.Client
	items []string
	rate  int

	sent, failed, late atomic.Int64
	mu                 sync.Mutex
	write              []time.Duration // how long each PATCH took
	firstErr           error
}

// run sends for d (or until ctx ends) and returns how long it ran.
func (g *generator) run(ctx context.Context, d time.Duration) time.Duration {
	start := time.Now()
	end := start.Add(d)
	interval := time.Duration(len(g.items)) * time.Second / time.Duration(g.rate)
	var wg sync.WaitGroup
	for w, item := range g.items {
		wg.Go(func() {
			next := start.Add(time.Duration(w) * interval / time.Duration(len(g.items)))
			for {
				now := time.Now()
				if now.Before(next) {
					select {
					case <-ctx.Done():
						return
					case <-time.After(next.Sub(now)):
					}
					now = time.Now()
				}
				if !now.Before(end) || ctx.Err() != nil {
					return
				}
				title := "lt-" + strconv.FormatInt(now.UnixNano(), 10)
				_, err := g.api.UpdateWorkItem(ctx, item, wire.UpdateWorkItem{Title: &title})
				took := time.Since(now)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					g.failed.Add(1)
					g.mu.Lock()
					if g.firstErr == nil {
						g.firstErr = err
					}
					g.mu.Unlock()
				} else {
					g.sent.Add(1)
					g.mu.Lock()
					g.write = append(g.write, took)
					g.mu.Unlock()
				}
				next = next.Add(interval)
				// A sender more than a second behind its schedule skips
				// ahead: the rate it reaches is then reported as is.
				if behind := time.Since(next); behind > time.Second {
					skipped := int64(behind / interval)
					g.late.Add(skipped)
					next = next.Add(time.Duration(skipped) * interval)
				}
			}
		})
	}
	wg.Wait()
	return min(time.Since(start), d)
}

// verdict is the check of every subscriber against the journal.
type verdict struct {
	events                      int   // in the journal between the cursor and the end
	lost, duplicate, outOfOrder int64 // over every subscriber
	extra                       int64 // received but not in the journal
	reconnects                  int
	worst                       string // the first subscriber that missed, and how
}

// check compares what each subscriber received with the journal's
// events after their common cursor up to end: each must hold every seq
// exactly once, in order.
func check(subs []*subscriber, journal []int64) verdict {
	v := verdict{events: len(journal)}
	want := make(map[int64]bool, len(journal))
	for _, s := range journal {
		want[s] = true
	}
	last := int64(-1)
	if len(journal) > 0 {
		last = journal[len(journal)-1]
	}
	for i, s := range subs {
		v.reconnects += s.reconnects
		got := make(map[int64]int, len(s.seqs))
		prev := int64(-1)
		var lost, dup, ooo, extra int64
		for _, q := range s.seqs {
			if q > last {
				break // past the end of the check
			}
			got[q]++
			switch {
			case got[q] > 1:
				dup++
			case q < prev:
				ooo++
			}
			if !want[q] {
				extra++
			}
			prev = max(prev, q)
		}
		for _, q := range journal {
			if got[q] == 0 {
				lost++
			}
		}
		if (lost > 0 || dup > 0 || ooo > 0 || extra > 0) && v.worst == "" {
			v.worst = fmt.Sprintf("subscriber %d: %d lost, %d duplicate, %d out of order, %d not in the journal", i, lost, dup, ooo, extra)
		}
		v.lost += lost
		v.duplicate += dup
		v.outOfOrder += ooo
		v.extra += extra
	}
	return v
}

// journalSeqs lists the seqs of the journal after after up to end, as
// GET /events pages them.
func journalSeqs(ctx context.Context, api *apiclient.Client, after, end int64) ([]int64, error) {
	var out []int64
	for after < end {
		evs, err := api.ListEvents(ctx, after, "", 1000)
		if err != nil {
			return nil, fmt.Errorf("read the journal after %d: %w", after, err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Seq > end {
				return out, nil
			}
			out = append(out, e.Seq)
			after = e.Seq
		}
	}
	return out, nil
}

// eventSeq is the journal position a read sees now (Pam-Event-Seq).
func eventSeq(ctx context.Context, api *apiclient.Client) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.BaseURL+"/api/v1/hosts", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+api.Token)
	resp, err := api.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("journal position: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	seq, err := strconv.ParseInt(resp.Header.Get("Pam-Event-Seq"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("journal position: GET /hosts answered %s without a Pam-Event-Seq", resp.Status)
	}
	return seq, nil
}
