package holder

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"
)

// floodSize is the output of one benchmark iteration.
const floodSize = 32 << 20

// BenchmarkFlood compares the output throughput a program gets through a
// holder to one reader with the same program on a PTY read directly
// (the naive baseline), and reports the holder's memory: VmHWM (peak
// resident) at the end of the flood and VmRSS of an idle holder.
//
//	go test -run '^$' -bench Flood -benchtime 5x ./internal/holder
func BenchmarkFlood(b *testing.B) {
	b.Run("holder", func(b *testing.B) {
		b.SetBytes(floodSize)
		var hwm, idle int
		for range b.N {
			b.StopTimer()
			f := newFixture(b)
			report := filepath.Join(b.TempDir(), "r")
			s := f.spec("pam-00000020", f.ws, "__flood", fmt.Sprint(floodSize), "0", report)
			// What is measured is the holder's forwarding, not its release
			// policy: on a loaded machine an unpaced flood outruns a reader
			// by 1 MiB now and then, which would release it.
			s.PendingLimit = 2 * floodSize
			pid := f.start(s)
			c := f.dial("pam-00000020", Hello{})
			idle = max(idle, procKiB(pid, "VmRSS"))
			waitReady(b, report)
			b.StartTimer()
			if err := syscall.Kill(c.Info.ChildPID, syscall.SIGUSR1); err != nil {
				b.Fatal(err)
			}
			// A lean reader: payloads discarded, not copied.
			got := 0
			var h [headerLen]byte
			for {
				if _, err := io.ReadFull(c.br, h[:]); err != nil {
					b.Fatalf("after %d bytes: %v", got, err)
				}
				n := int(binary.BigEndian.Uint32(h[1:]))
				if _, err := c.br.Discard(n); err != nil {
					b.Fatalf("after %d bytes: %v", got, err)
				}
				if FrameType(h[0]) == FrameOutput {
					got += n
				}
				if FrameType(h[0]) == FrameExit {
					break
				}
			}
			hwm = max(hwm, procKiB(pid, "VmHWM"))
			if got < floodSize {
				b.Fatalf("got %d bytes", got)
			}
		}
		b.ReportMetric(float64(hwm), "peak-rss-KiB")
		b.ReportMetric(float64(idle), "idle-rss-KiB")
	})
	b.Run("raw-pty", func(b *testing.B) {
		b.SetBytes(floodSize)
		for range b.N {
			b.StopTimer()
			report := filepath.Join(b.TempDir(), "r")
			cmd := exec.Command(testBin(b), "__flood", fmt.Sprint(floodSize), "0", report)
			p, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: DefaultRows, Cols: DefaultCols})
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReaderSize(p, readChunk)
			if _, err := io.ReadFull(br, make([]byte, len("ready"))); err != nil {
				b.Fatal(err)
			}
			waitReady(b, report)
			b.StartTimer()
			_ = cmd.Process.Signal(syscall.SIGUSR1)
			got := 0
			buf := make([]byte, readChunk)
			for got < floodSize {
				n, err := br.Read(buf)
				got += n
				if err != nil {
					break
				}
			}
			b.StopTimer()
			_ = cmd.Wait()
			p.Close()
			if got < floodSize {
				b.Fatalf("got %d bytes", got)
			}
			b.StartTimer()
		}
	})
}

// procKiB reads a "Vm…: N kB" line of /proc/<pid>/status.
func procKiB(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
