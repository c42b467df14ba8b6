package tmux

import (
	"hash/fnv"
	"os"
	"strconv"
	"strings"
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

// procCPU is the user+system time of pid from /proc (Linux; 0 elsewhere),
// assuming the usual 100 clock ticks per second.
func procCPU(pid int) time.Duration {
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
