package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"golang.org/x/sync/errgroup"

	"pam/internal/datadir"
	"pam/internal/dispatch"
	"pam/internal/fleet"
	"pam/internal/journal"
	"pam/internal/notify"
	"pam/internal/server"
	"pam/internal/store"
	"pam/internal/wire"
)

// parts runs every part of serve in g until ctx ends or one of them
// stops: a part that fails cancels the others and its error, named, is
// what Run returns. The HTTP side runs from the start, the standby's wait
// included; the active parts join once the lock is ours. The shutdown
// part stops the HTTP side once gctx ends; Run returns only when all of
// them have, and the deferred closes of the store, the lock's connection
// and the database come after that.
type parts struct {
	ctx  context.Context // Run's: its end is a requested stop, not a failure
	stop context.CancelFunc
	g    *errgroup.Group
	gctx context.Context
}

func startParts(ctx context.Context) *parts {
	runCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	return &parts{ctx: ctx, stop: stop, g: g, gctx: gctx}
}

// run starts a part that must run until gctx ends.
func (p *parts) run(name string, run func(context.Context) error) {
	p.g.Go(func() error {
		err := run(p.gctx)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", name, err)
		case p.gctx.Err() == nil:
			return fmt.Errorf("%s stopped unexpectedly", name)
		}
		return nil
	})
}

// serveHTTP runs the HTTP side as a part, and another part that shuts it
// down once gctx ends.
func (p *parts) serveHTTP(httpSrv *http.Server, ln net.Listener, front *front, log *slog.Logger) {
	p.run("http server", func(context.Context) error {
		if err := httpSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	p.g.Go(func() error {
		<-p.gctx.Done()
		log.Info("pam serve shutting down")
		shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		// The listener first (and the plain requests in flight), then
		// the sockets and watchers only the server knows of.
		if err := httpSrv.Shutdown(shutCtx); err != nil {
			log.Warn("http shutdown", "err", err)
		}
		if err := front.shutdown(shutCtx); err != nil {
			log.Warn("server shutdown", "err", err)
		}
		return nil
	})
}

// abort stops what runs so far and, once it has, returns why: nothing
// when ctx asked for the stop (SIGTERM to a standby), the part that
// failed when that is what cancelled the step, else the step's error.
func (p *parts) abort(err error) error {
	p.stop()
	werr := p.g.Wait()
	switch {
	case p.ctx.Err() != nil:
		return nil
	case errors.Is(err, context.Canceled) && werr != nil:
		return werr
	}
	return err
}

// adoptOperatorToken is the operator token (from the data dir's token
// file, made on the first start), which is the admin token named admin
// (adopted once, on the first start with named tokens).
func adoptOperatorToken(ctx context.Context, st *store.Store, o Options) (string, error) {
	token, err := operatorToken(ctx, st, o.DataDir, o.Logger)
	if err != nil {
		return "", err
	}
	if err := st.AdoptAdminToken(ctx, token); err != nil {
		return "", err
	}
	return token, nil
}

// active is what the active serve runs besides the HTTP side.
type active struct {
	hub        *journal.Hub
	notifier   *notify.Notifier
	placement  *store.Store
	dispatcher *dispatch.Dispatcher
	srv        *server.Server
}

// assemble wires the active serve's parts to st and to each other: the
// event journal (whose events also go to the log), notifications, the
// dispatcher on a pool of its own, and the API server.
func assemble(ctx context.Context, st *store.Store, token string, o Options) (*active, error) {
	st.Policy = store.Policy{MaxAttempts: o.MaxAttempts, RestartInitialDelay: o.RestartInitialDelay, RestartMaxDelay: o.RestartMaxDelay}
	hub := journal.NewHub(st, journal.Options{Logger: o.Logger, Retention: o.EventRetention})
	logRun := runLogger(o.Logger)
	hub.Observe(func(evs []wire.Event) {
		for _, ev := range evs {
			logRun(ev)
		}
	})
	notifier := notify.New(notify.Options{Store: st, PublicURL: o.PublicURL, Logger: o.Logger})
	st.AfterCommit = func() { hub.Wake(); notifier.Wake() }
	workers := fleet.New(1000)
	// Placement has connections of its own: a busy API never makes a run
	// wait for one to be offered.
	placement, err := st.WithOwnPool(ctx, 2)
	if err != nil {
		return nil, err
	}
	dispatcher := dispatch.New(placement, workers, dispatch.Options{
		AckTimeout: o.DispatchAckTimeout, DispatchTimeout: o.DispatchTimeout, SpawnTimeout: o.SpawnTimeout,
		HostOfflineAfter: o.HostOfflineAfter, HostLostAfter: o.HostLostAfter, CLIHangTimeout: o.CLIHangTimeout,
		CompletedStopAfter: o.CompletedStopAfter, Logger: o.Logger,
	})
	srv := server.New(server.Options{Store: st, Events: hub, Token: token, MetricsPublic: o.MetricsPublic, Logger: o.Logger,
		Version: o.Version, HostOfflineAfter: o.HostOfflineAfter, Fleet: workers, Dispatcher: dispatcher,
		LeaseTTL: o.LeaseTTL, CaptureInterval: o.CaptureInterval, Clock: o.Clock, ContinueTick: o.ContinueTick, Notifier: notifier,
		OperatorTokenChanged: func(secret string) {
			if err := datadir.WriteToken(o.DataDir, secret); err != nil {
				o.Logger.Warn("write the rotated admin token to the token file", "file", datadir.TokenPath(o.DataDir), "err", err)
			}
		}})
	// Revocations made by other serves of the database reach this one
	// through the journal.
	hub.Observe(srv.ObserveEvents)
	return &active{hub: hub, notifier: notifier, placement: placement, dispatcher: dispatcher, srv: srv}, nil
}
