package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/tmux"
	"pam/internal/wire"

	"github.com/charmbracelet/x/vt"
)

// BenchmarkScreenModel is how fast the pty executor's screen model
// (github.com/charmbracelet/x/vt, 220×50) takes a coloured flood of
// scrolling output and in-place repaints, and how long a capture
// (Render) takes: the worker reads
// every holder through it, and a reader that falls 1 MiB behind is
// released by the holder.
//
//	go test -run '^$' -bench ScreenModel ./internal/worker
func BenchmarkScreenModel(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<20; i++ {
		fmt.Fprintf(&sb, "\x1b[3%dmline %06d\x1b[0m %s\r\n", i%8, i, strings.Repeat("lorem ipsum ", 15))
	}
	chunk := []byte(sb.String())
	b.Run("scroll", func(b *testing.B) {
		t := vt.NewEmulator(220, 50)
		t.SetScrollbackSize(1)
		drain(b, t)
		b.SetBytes(int64(len(chunk)))
		for range b.N {
			_, _ = t.Write(chunk)
		}
	})
	// A full-screen program repaints in place (cursor addressing, no
	// scrolling), as agent CLIs' interfaces do.
	var paint strings.Builder
	for row := 1; row <= 50; row++ {
		fmt.Fprintf(&paint, "\x1b[%d;1H\x1b[3%dm%s\x1b[0m", row, row%8, strings.Repeat("x", 200))
	}
	frame := []byte(paint.String())
	b.Run("repaint", func(b *testing.B) {
		t := vt.NewEmulator(220, 50)
		t.SetScrollbackSize(1)
		drain(b, t)
		b.SetBytes(int64(len(frame)))
		for range b.N {
			_, _ = t.Write(frame)
		}
	})
	b.Run("render", func(b *testing.B) {
		t := vt.NewEmulator(220, 50)
		t.SetScrollbackSize(1)
		drain(b, t)
		_, _ = t.Write(chunk)
		b.ResetTimer()
		for range b.N {
			_ = t.Render()
		}
	})
}

// drain drops what the emulator answers, until the benchmark ends.
func drain(b *testing.B, t *vt.Emulator) {
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, t); close(done) }()
	b.Cleanup(func() {
		_ = t.InputPipe().(*io.PipeWriter).CloseWithError(io.EOF)
		<-done
	})
}

// BenchmarkScreenFlood is what a flood of scrolling output (4 MiB per
// op, through a real holder) costs the worker's screen model: CPU of
// this process per MiB, until the capture shows the flood's last line.
// "budget" is the model as it runs (at most modelBudget per window, the
// rest skipped); "every-byte" parses all of it, the naive baseline.
//
//	go test -run '^$' -bench ScreenFlood -benchtime 1x ./internal/worker
func BenchmarkScreenFlood(b *testing.B) {
	if testing.Short() {
		b.Skip("builds pam")
	}
	pam := pamtest.Pam(b)
	for _, c := range []struct {
		name   string
		budget int
	}{{"budget", 0}, {"every-byte", 1 << 40}} {
		b.Run(c.name, func(b *testing.B) {
			e := newPTYExecutor(Options{PamBinary: pam}, filepath.Join(b.TempDir(), "worker"), slog.New(slog.NewTextHandler(io.Discard, nil)))
			e.modelBudget = c.budget
			name := mustSession(b, "pam-"+runA[:8])
			// Each line "NNNNNN" + 94 spaces; a line "end-K" after each op's flood.
			script := `n=0; while read k; do i=0; while [ $i -lt 42 ]; do seq -f '%06g                                                                                              ' 1 1000; i=$((i+1)); done; echo "end-$k"; done`
			err := e.NewSession(b.Context(), tmux.Spawn{Name: name, Cwd: b.TempDir(), RunID: runA, Attempt: 1, Instance: "5e5e5e5e-1111-4111-8111-111111111111",
				Command: []string{"/bin/sh", "-c", script}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = e.KillSession(context.Background(), name) })
			if _, err := e.screen(name.String(), false); err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			b.ResetTimer()
			for i := range b.N {
				before := selfCPU()
				if err := e.SendKeys(b.Context(), name, []wire.Key{{Text: fmt.Sprint(i)}, {Key: "Enter"}}); err != nil {
					b.Fatal(err)
				}
				want := fmt.Sprintf("\nend-%d\n", i)
				if !eventually.Within(5*time.Minute, func() bool {
					c, _ := e.Capture(b.Context(), name)
					return strings.Contains(c, want)
				}) {
					b.Fatal("the flood's end never showed in the capture")
				}
				cpu += selfCPU() - before
			}
			b.StopTimer()
			mib := float64(b.N) * 42 * 1000 * 101 / (1 << 20)
			b.ReportMetric(float64(cpu.Milliseconds())/mib, "cpu-ms/MiB")
			b.ReportMetric(mib/b.Elapsed().Seconds(), "MiB/s")
		})
	}
}

// selfCPU is the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
