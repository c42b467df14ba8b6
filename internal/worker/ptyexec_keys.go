package worker

import (
	"fmt"
	"strings"

	"pam/internal/wire"
)

// The pty executor's keys: the bytes SendKeys writes to a holder for
// named keys, as tmux would send them.

// termModes are the input modes a program set on its terminal that
// change what a key sends.
type termModes struct {
	paste     bool // bracketed paste (CSI ?2004h)
	appCursor bool // application cursor keys (CSI ?1h, DECCKM)
}

// keySeqs are the bytes tmux 3.3 sends for each named key of
// wire.KeyNames (its input-keys table; TestExecutorsSendTheSameBytes
// holds the two executors to it). appCursorSeqs replace the arrows while
// the program asked for application cursor keys.
var (
	keySeqs = map[string]string{
		"Enter": "\r", "Escape": "\x1b", "Tab": "\t", "BTab": "\x1b[Z", "Space": " ", "BSpace": "\x7f", "DC": "\x1b[3~",
		"Up": "\x1b[A", "Down": "\x1b[B", "Right": "\x1b[C", "Left": "\x1b[D",
		"Home": "\x1b[1~", "End": "\x1b[4~", "PageUp": "\x1b[5~", "PageDown": "\x1b[6~",
		"C-c": "\x03", "C-d": "\x04",
		"0": "0", "1": "1", "2": "2", "3": "3", "4": "4", "5": "5", "6": "6", "7": "7", "8": "8", "9": "9", "y": "y", "n": "n",
	}
	appCursorSeqs = map[string]string{"Up": "\x1bOA", "Down": "\x1bOB", "Right": "\x1bOC", "Left": "\x1bOD"}
)

// keyBytes is what a terminal sends for keys under modes m.
func keyBytes(keys []wire.Key, m termModes) ([]byte, error) {
	var b []byte
	for _, k := range keys {
		switch {
		case k.Key != "":
			seq, ok := keySeqs[k.Key]
			if app, ok := appCursorSeqs[k.Key]; ok && m.appCursor {
				seq = app
			}
			if !ok {
				return nil, fmt.Errorf("key %q has no terminal sequence", k.Key)
			}
			b = append(b, seq...)
		case k.Text != "":
			b = append(b, k.Text...)
		default:
			// As tmux's paste-buffer without -r: a newline is pasted
			// as the carriage return a terminal's Enter sends.
			if m.paste {
				b = append(b, "\x1b[200~"...)
			}
			b = append(b, strings.ReplaceAll(k.Paste, "\n", "\r")...)
			if m.paste {
				b = append(b, "\x1b[201~"...)
			}
		}
	}
	return b, nil
}
