package wrap

import (
	"os"
	"testing"

	"github.com/creack/pty"
)

// isTerminal tells a live terminal from a pipe and from a terminal whose
// other side hung up (what the wrapper sees when its session is killed).
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(r) || paneTerminal(r) != nil {
		t.Error("a pipe counts as a terminal")
	}

	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if !isTerminal(tty) || paneTerminal(tty) != tty {
		t.Fatal("a live pty does not count as a terminal")
	}
	master.Close()
	if isTerminal(tty) {
		t.Error("a pty whose master is closed still counts as a terminal")
	}
}
