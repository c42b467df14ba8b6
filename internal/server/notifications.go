package server

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"

	"pam/internal/wire"
)

// Notification channels and answer URLs (docs/notifications.md).

// answersPath is the prefix of the answer URLs: the rest of the path is
// a credential, which the request log never shows (logPath).
const answersPath = "/api/v1/answers/"

// maxDeliveries is how many attempts GET /notifications/{id}/deliveries lists.
const maxDeliveries = 100

func (s *Server) notificationRoutes(api func(string, http.HandlerFunc)) {
	api("GET /notifications", s.listChannels)
	api("POST /notifications", s.createChannel)
	api("POST /notifications/{id}/test", s.testChannel)
	api("GET /notifications/{id}/deliveries", s.channelDeliveries)
	api("DELETE /notifications/{id}", s.deleteChannel)
	// The answer URL's token is its own credential: no bearer token.
	s.mux.Handle("POST "+answersPath+"{token}", checked(s.useAnswer))
}

// wakeNotifier tells the notifier that the queue changed.
func (s *Server) wakeNotifier() {
	if s.opts.Notifier != nil {
		s.opts.Notifier.Wake()
	}
}

func (s *Server) listChannels(w http.ResponseWriter, r *http.Request) {
	cs, err := s.store.ListChannels(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ChannelList{Channels: cs})
}

func (s *Server) createChannel(w http.ResponseWriter, r *http.Request) {
	var in wire.CreateChannel
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		s.fail(w, r, err)
		return
	}
	secret := hex.EncodeToString(b[:])
	c, err := s.store.CreateChannel(r.Context(), in, secret)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wire.ChannelCreated{Channel: c, Secret: secret})
}

func (s *Server) testChannel(w http.ResponseWriter, r *http.Request) {
	if err := s.store.EnqueueTest(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.wakeNotifier()
	writeJSON(w, http.StatusAccepted, map[string]bool{"queued": true})
}

func (s *Server) channelDeliveries(w http.ResponseWriter, r *http.Request) {
	ds, err := s.store.Deliveries(r.Context(), r.PathValue("id"), maxDeliveries)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.DeliveryList{Deliveries: ds})
}

func (s *Server) deleteChannel(w http.ResponseWriter, r *http.Request) {
	if err := s.store.DeleteChannel(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// useAnswer is POST /api/v1/answers/{token}: the single-use URL a
// notification carries presses its choice's key in the run it was made
// for, as POST /runs/{id}/keys would, and the answer that lands clears
// the question journaled with source answer and the channel as actor.
// Used, expired or no longer asked: 410 answer_expired.
func (s *Server) useAnswer(w http.ResponseWriter, r *http.Request) {
	a, err := s.store.UseAnswer(r.Context(), r.PathValue("token"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	run := a.Run
	keys := []wire.Key{{Key: a.Key}}
	if err := wire.ValidateKeys(keys); err != nil || run.HostID == nil {
		s.fail(w, r, wire.Errorf(wire.CodeAnswerExpired, "this answer link no longer holds"))
		return
	}
	defer s.answers.begin(run.ID)()
	defer s.linkAnswers.begin(run.ID, linkAnswer{channel: a.Channel, question: questionOf(run), attempt: run.Attempt})()
	before := s.opts.Fleet.Pane(run.ID).Seq
	if err := s.opts.Fleet.Send(*run.HostID, wire.SendKeysFrame{RunID: run.ID, Attempt: wire.IntPtr(run.Attempt), Keys: keys}); err != nil {
		// Nothing was pressed: the link may be used again.
		if err := s.store.Unuse(r.Context(), a); err != nil {
			s.log.Warn("make an answer link usable again", "run_id", run.ID, "err", err)
		}
		s.fail(w, r, wire.Errorf(wire.CodeUnavailable, "the run's host is not connected; try again"))
		return
	}
	if err := s.store.TouchInput(r.Context(), run.ID, run.Attempt); err != nil {
		s.log.Warn("record an answer as input", "run_id", run.ID, "err", err)
	}
	observed := s.paneChangedSince(r.Context(), run.ID, before)
	if r.Context().Err() != nil {
		return
	}
	delivery := wire.DeliveryUnconfirmed
	if observed {
		delivery = wire.DeliveryObserved
		if _, _, err := s.runs.ClearAnsweredBy(r.Context(), run.ID, run.Attempt, wire.AttentionNeedsInput, questionOf(run), wire.AttentionSourceAnswer, a.Channel); err != nil {
			s.log.Warn("clear attention after an answer link", "run_id", run.ID, "err", err)
		}
	}
	s.log.Info("answer link used", "run_id", run.ID, "key", a.Key, "channel", a.Channel, "delivery", delivery)
	writeJSON(w, http.StatusAccepted, wire.KeysResult{Delivery: delivery})
}

// logPath is the path a log line may show: an answer URL's token is a
// credential, so it is left out.
func logPath(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, answersPath) {
		return answersPath + "<redacted>"
	}
	return r.URL.Path
}

// linkAnswer is an answer URL's key being checked: whose question it
// answers and through which channel.
type linkAnswer struct {
	channel, question string
	attempt           int
}

// linkAnswers holds the answer URLs being checked, by run.
type linkAnswers struct {
	mu sync.Mutex
	m  map[string]linkAnswer
}

func (l *linkAnswers) begin(runID string, a linkAnswer) (done func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]linkAnswer{}
	}
	l.m[runID] = a
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.m, runID)
	}
}

func (l *linkAnswers) get(runID string) (linkAnswer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.m[runID]
	return a, ok
}
