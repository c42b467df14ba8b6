package fleet

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"pam/internal/wire"
)

// Screen is the latest reading of a run's screen, as the worker of the
// run's host reported it (docs/architecture.md#the-screen-is-read): what
// a hook's needs_input takes its question from, and what says whether the
// agent is busy.
type Screen struct {
	HostID    string
	Attempt   int
	Attention string // none, needs_input or rate_limited
	Working   bool
	// Detail is the question (source screen); nil when it asks nothing.
	Detail *wire.AttentionDetail
	At     time.Time
}

// screens keeps the latest Screen of each run, as many runs as the pane
// cache (the worker resends them on every reconnect, so a restarted
// server has them again at once).
type screens struct {
	once sync.Once
	max  int
	c    *lru.Cache[string, Screen]
}

func (s *screens) cache() *lru.Cache[string, Screen] {
	s.once.Do(func() { s.c, _ = lru.New[string, Screen](max(s.max, 1)) })
	return s.c
}

// PutScreen records a run's latest screen reading.
func (f *Fleet) PutScreen(runID string, s Screen) { f.screens.cache().Add(runID, s) }

// Screen returns a run's latest screen reading, if there is one.
func (f *Fleet) Screen(runID string) (Screen, bool) { return f.screens.cache().Get(runID) }
