package tmux

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pam/internal/pamtest"
)

// BenchmarkCaptureHash is one cycle of the worker's capture loop for one
// session: capture-pane -p -e of a full, coloured 220×50 screen, then a
// hash for change detection. Besides ns/op it reports the CPU time the
// cycle costs the host, split into the calling process, the tmux client
// processes it forks, and the tmux server: at 1 Hz, cpu-µs/op is the CPU
// per session per second (1000 µs/op = 0.1% of one core).
func BenchmarkCaptureHash(b *testing.B) {
	dir := pamtest.NewTmux(b).Dir
	tm, err := New(Options{TmuxTmpDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	s := &server{dir: dir, tm: tm}
	name, _ := ParseSessionName("pam-0123abcd")
	c := b.Context()
	err = tm.NewSession(c, Spawn{Name: name, Cwd: dir, Title: "bench", RunID: runA, Attempt: 1, Instance: instA,
		Command: []string{"/bin/sh", "-c", `i=0; while [ $i -lt 60 ]; do printf '\033[3%dmline %03d %s\033[0m\n' $((i%8)) $i "$(printf '%0180d' $i)"; i=$((i+1)); done; exec sleep 600`}})
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := tm.Capture(c, name)
		if strings.Contains(out, "line 059") {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("screen never filled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pidText, _ := s.raw("display-message", "-p", "#{pid}")
	serverPID, _ := strconv.Atoi(strings.TrimSpace(pidText))

	self0, child0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	server0 := procCPU(serverPID)
	b.ResetTimer()
	var size int
	for i := 0; i < b.N; i++ {
		out, err := tm.Capture(c, name)
		if err != nil {
			b.Fatal(err)
		}
		h := fnv.New64a()
		h.Write([]byte(out))
		_ = h.Sum64()
		size = len(out)
	}
	b.StopTimer()
	self := rusage(syscall.RUSAGE_SELF) - self0
	child := rusage(syscall.RUSAGE_CHILDREN) - child0
	srv := procCPU(serverPID) - server0
	n := float64(b.N)
	b.ReportMetric(float64(self.Microseconds())/n, "self-cpu-µs/op")
	b.ReportMetric(float64(child.Microseconds())/n, "client-cpu-µs/op")
	b.ReportMetric(float64(srv.Microseconds())/n, "server-cpu-µs/op")
	b.ReportMetric(float64((self+child+srv).Microseconds())/n, "cpu-µs/op")
	b.ReportMetric(float64(size), "capture-bytes")
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time of pid (Linux; 0 elsewhere): its main
// thread's run time in nanoseconds from /proc/<pid>/schedstat when the
// kernel keeps it (tmux is single-threaded), else user+system time from
// /proc/<pid>/stat at the usual 100 clock ticks per second.
func procCPU(pid int) time.Duration {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// Figures of BenchmarkCapture (docs/bench.md#capture-cost).
const (
	benchSessions = 100
	benchRounds   = 5 // one op: this many rounds, a second apart
)

// BenchmarkCapture is the capture loop's cost for 100 sessions whose
// panes all change twice a second, captured at 1 Hz: exec-per-poll (one
// `tmux capture-pane` process per session per round, as before) against
// control-mode (the Capturer: one list-panes and one batch of
// capture-pane commands for the changed panes, on one control client).
//
// The CPU counted is this process's, the tmux server's and every tmux
// client's (the forked ones, reaped, through RUSAGE_CHILDREN; the control
// client and the server from /proc), in percent of one core. The panes'
// own programs are sleep(1); their lines come from this process, written
// to the panes' terminals twice a second each, so that nothing else forks
// meanwhile, on screens filled first (50 lines of 80–130 coloured
// columns): the steady state, and what an agent's screen looks like. Writing and reading those lines costs this process and the
// server the same with or without captures, so each op alternates a
// second with a round of captures and a second without any: core-% is
// the CPU of the first kind less that of the second (what capturing
// adds), gross-core-% and baseline-core-% are the two; alternating keeps
// a machine whose load drifts from skewing one against the other.
// Each kind is divided by its own wall time: a round that overruns its
// second (exec-per-poll on a busy machine) makes a longer one, and fewer
// captures/s, which is what it would do to the worker's loop too.
// captures/s is per second with a round; cpu-µs/capture is core-% per
// capture.
func BenchmarkCapture(b *testing.B) {
	dir := pamtest.NewTmux(b).Dir
	tm, err := New(Options{TmuxTmpDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	s := &server{dir: dir, tm: tm}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		b.Fatal(err)
	}
	c := b.Context()
	names := make([]SessionName, benchSessions)
	for i := range names {
		names[i], _ = ParseSessionName(fmt.Sprintf("pam-%08x", 0xbe000000+i))
		runID := fmt.Sprintf("%08x-1111-4111-8111-111111111111", 0xbe000000+i)
		if err := tm.NewSession(c, Spawn{Name: names[i], Cwd: dir, Title: "bench", RunID: runID, Attempt: 1, Instance: instA,
			Command: []string{sleep, "100000"}}); err != nil {
			b.Fatal(err)
		}
	}
	pidText, _ := s.raw("display-message", "-p", "#{pid}")
	serverPID, _ := strconv.Atoi(strings.TrimSpace(pidText))
	ttys := paneTTYs(b, s, names)
	// The steady state of a pane printing a line a second: a full screen.
	for k, f := range ttys {
		for i := range Height {
			fmt.Fprintf(f, "\033[3%dmsession %03d line %06d %s\033[0m\n", i%8, k, i, strings.Repeat("=", 60+i%50))
		}
	}
	for {
		out, err := tm.Capture(c, names[len(names)-1])
		if err != nil {
			b.Fatal(err)
		}
		if strings.Count(out, "line ") >= Height-1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop := writeLines(ttys)
	defer stop()

	b.Run("exec-per-poll", func(b *testing.B) {
		b.ResetTimer()
		m, err := measureCPU(b.Context(), b.N, serverPID, 0, func(ctx context.Context) (int, error) {
			for _, n := range names {
				out, err := tm.Capture(ctx, n)
				if err != nil {
					return 0, err
				}
				hashCapture(out)
			}
			return len(names), nil
		})
		if err != nil {
			b.Fatal(err)
		}
		m.report(b)
	})
	b.Run("control-mode", func(b *testing.B) {
		cp := tm.NewCapturer(CapturerOptions{Instance: instA})
		defer cp.Close()
		round := func(ctx context.Context) (int, error) {
			cp.Refresh(ctx, names)
			var changed []SessionName
			for _, name := range names {
				if cp.MayHaveChanged(name) {
					changed = append(changed, name)
				}
			}
			for _, r := range cp.CaptureAll(ctx, changed) {
				if r.Err != nil {
					return 0, r.Err
				}
				hashCapture(r.Text)
			}
			return len(changed), nil
		}
		if _, err := round(c); err != nil { // the client starts here, outside the figure
			b.Fatal(err)
		}
		pid := cp.ControlPID()
		if pid == 0 {
			b.Fatal("no control client")
		}
		b.ResetTimer()
		m, err := measureCPU(b.Context(), b.N, serverPID, pid, round)
		if err != nil {
			b.Fatal(err)
		}
		if st := cp.Stats(); st.Exec > 0 || st.Lost > 0 || cp.ControlPID() != pid {
			b.Fatalf("the control client failed during the benchmark: %+v", st)
		}
		m.report(b)
	})
}

// cpuMeasure is the CPU and wall time of the seconds with a round of
// captures (busy: from the round's start to the next tick, longer than
// a second when the round overran it) and of those without (idle), and
// the captures made.
type cpuMeasure struct {
	busy, idle         time.Duration
	busyWall, idleWall time.Duration
	captures           int
}

// report reports the figures of BenchmarkCapture.
func (m cpuMeasure) report(b *testing.B) {
	gross := 100 * m.busy.Seconds() / m.busyWall.Seconds()
	baseline := 100 * m.idle.Seconds() / m.idleWall.Seconds()
	net := gross - baseline
	b.ReportMetric(net, "core-%")
	b.ReportMetric(gross, "gross-core-%")
	b.ReportMetric(baseline, "baseline-core-%")
	perSecond := float64(m.captures) / m.busyWall.Seconds()
	b.ReportMetric(perSecond, "captures/s")
	if perSecond > 0 {
		// One percent of a core is 10,000 µs of CPU per second.
		b.ReportMetric(net*1e4/perSecond, "cpu-µs/capture")
	}
}

// measureCPU runs, per op, benchRounds pairs of seconds: one without
// captures, then one that starts with a round. It adds up the CPU this
// process, its reaped children, the tmux server and the control client
// (ctlPID, if any) used in each kind of second, and their wall times.
func measureCPU(ctx context.Context, ops, serverPID, ctlPID int, round func(context.Context) (int, error)) (cpuMeasure, error) {
	cpu := func() time.Duration {
		d := rusage(syscall.RUSAGE_SELF) + rusage(syscall.RUSAGE_CHILDREN) + procCPU(serverPID)
		if ctlPID != 0 {
			d += procCPU(ctlPID)
		}
		return d
	}
	var m cpuMeasure
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastAt := cpu(), time.Now()
	for range ops * benchRounds {
		<-tick.C // a second without captures
		now, nowAt := cpu(), time.Now()
		m.idle += now - last
		m.idleWall += nowAt.Sub(lastAt)
		n, err := round(ctx)
		if err != nil {
			return m, err
		}
		m.captures += n
		<-tick.C // the rest of the second with them (none left if it overran)
		last, lastAt = cpu(), time.Now()
		m.busy += last - now
		m.busyWall += lastAt.Sub(nowAt)
	}
	return m, nil
}

func hashCapture(out string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(out))
	return h.Sum64()
}

// paneTTYs opens the terminal of each session's pane for writing.
func paneTTYs(b *testing.B, s *server, names []SessionName) []*os.File {
	out, err := s.raw("list-panes", "-a", "-F", "#{session_name} #{pane_tty}")
	if err != nil {
		b.Fatal(err, out)
	}
	byName := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			byName[f[0]] = f[1]
		}
	}
	ttys := make([]*os.File, len(names))
	for i, n := range names {
		f, err := os.OpenFile(byName[n.String()], os.O_WRONLY|syscall.O_NOCTTY, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		ttys[i] = f
	}
	return ttys
}

// writeLines writes a changing, coloured line to every terminal twice a
// second, spread over the half second, until stop is called: whatever
// the ticks' drift, every pane has changed at every round.
func writeLines(ttys []*os.File) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second / time.Duration(2*len(ttys)))
		defer t.Stop()
		for i := 0; ; i++ {
			k := i % len(ttys)
			fmt.Fprintf(ttys[k], "\033[3%dmsession %03d line %06d %s\033[0m\n", i%8, k, i/len(ttys), strings.Repeat("=", 60+i%50))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
