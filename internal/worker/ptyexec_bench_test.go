package worker

import (
	"fmt"
	"io"
	"strings"
	"testing"

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
