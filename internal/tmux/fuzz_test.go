package tmux

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"pam/internal/wire"
)

// tmuxSplit reads an argv the way tmux reads the commands given on its
// command line (cmd_parse_from_arguments in tmux's cmd-parse.c): an
// argument ending in ";" ends a command, unless that ";" follows a
// backslash, when the two stand for a literal ";"; the text before an
// ending ";" is still an argument of the command it ends.
func tmuxSplit(args []string) [][]string {
	var cmds [][]string
	var cur []string
	for _, a := range args {
		end := false
		if strings.HasSuffix(a, ";") {
			a = a[:len(a)-1]
			if strings.HasSuffix(a, `\`) {
				a = a[:len(a)-1] + ";"
			} else {
				end = true
			}
		}
		if !end || a != "" {
			cur = append(cur, a)
		}
		if end {
			cmds = append(cmds, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		cmds = append(cmds, cur)
	}
	return cmds
}

var (
	bufferRe = regexp.MustCompile(`^pam-keys-[0-9a-f]{8}-[0-9a-f]{8}$`)
	nameRe   = regexp.MustCompile(`^pam-[0-9a-f]{8}$`) // the oracle's own copy
)

// FuzzSendKeysArgs feeds hostile key requests and session names to what
// turns them into tmux arguments. Whatever the input: no panic; what the
// allowlist or the name check refuses never becomes a command; what is
// accepted becomes, as tmux reads the argv, exactly one send-keys per
// named key (an allowed name, aimed at the session by exact match), one
// literal send-keys per text (-l, the text after "--" and intact: never
// a key name or an option) and one set-buffer/paste-buffer pair per
// paste, the paste after "--" and intact, each buffer its own. And any
// argument survives tmux's command splitting unchanged once escaped.
func FuzzSendKeysArgs(f *testing.F) {
	for _, s := range []struct{ keys, name, raw string }{
		{`[{"key":"Enter"},{"text":"hello"}]`, "pam-0123abcd", "x;"},
		{`[{"text":"-t"},{"key":"Enter"},{"text":"Enter"},{"text":"C-c"},{"text":"x -- y"}]`, "pam-0123abcd", `x\;`},
		{`[{"text":"a; b"}]`, "pam-0123abcd", ";"},
		{`[{"key":"C-b"}]`, "pam-0123abcd", `\`},
		{`[{"key":"Enter;"}]`, "pam-0123abcd", `\\;`},
		{`[{"text":"\\"},{"key":"BSpace"},{"key":"DC"},{"key":"C-d"}]`, "pam-0123abcd", ""},
		{`[{"key":"Enter"}]`, "pam-0123abcd;kill-server", "kill-server"},
		{`[{"key":"Enter"}]`, "", "-t"},
		{`[{"key":"Enter"}]`, "pam-0123ABCD", "a;b;"},
		{`[]`, "pam-0123abcd", " "},
		{`[{"key":"1"},{"key":"Escape"},{"key":"BTab"},{"key":"PageUp"},{"text":"--"},{"text":"-l"}]`, "pam-0123abcd", "--"},
		{`[{"paste":"two\nlines;"},{"paste":"x;\n;"},{"key":"Enter"}]`, "pam-0123abcd", "a\n;"},
		{`[{"paste":"\u001b[201~"}]`, "pam-0123abcd", ""},
	} {
		f.Add([]byte(s.keys), s.name, s.raw)
	}
	f.Fuzz(func(t *testing.T, data []byte, name, raw string) {
		if !strings.ContainsRune(raw, 0) { // argv cannot carry NUL
			if got := tmuxSplit([]string{escapeArg(raw)}); raw != "" && (len(got) != 1 || !slices.Equal(got[0], []string{raw})) {
				t.Fatalf("escapeArg(%q) reads back as %q", raw, got)
			}
		}
		var keys []wire.Key
		if json.Unmarshal(data, &keys) != nil {
			return
		}
		sn := SessionName{s: name}
		cmds, buffers, err := sendKeysCommands(sn, keys)
		validName := nameRe.MatchString(name)
		if err != nil {
			if validName && wire.ValidateKeys(keys) == nil {
				t.Fatalf("valid keys for %q refused: %v", name, err)
			}
			return
		}
		if !validName || wire.ValidateKeys(keys) != nil {
			t.Fatalf("commands for session %q and refused keys %q", name, keys)
		}
		argv := commandLine(cmds...)
		if !slices.Equal(argv[:4], []string{"-L", Socket, "-f", os.DevNull}) {
			t.Fatalf("argv starts %q", argv[:4])
		}
		got := tmuxSplit(argv[4:])
		if len(got) != len(cmds) {
			t.Fatalf("tmux reads %d commands from %q, pam meant %d", len(got), argv, len(cmds))
		}
		target := "=" + name + ":"
		seen := map[string]bool{}
		i := 0
		for _, k := range keys {
			switch {
			case k.Key != "":
				if want := []string{"send-keys", "-t", target, k.Key}; !slices.Equal(got[i], want) {
					t.Fatalf("key %q reads as %q, want %q", k.Key, got[i], want)
				}
				i++
				continue
			case k.Text != "":
				if want := []string{"send-keys", "-l", "-t", target, "--", k.Text}; !slices.Equal(got[i], want) {
					t.Fatalf("text %q reads as %q, want %q", k.Text, got[i], want)
				}
				i++
				continue
			}
			set, paste := got[i], got[i+1]
			i += 2
			if len(set) != 5 || set[0] != "set-buffer" || set[1] != "-b" || set[3] != "--" || set[4] != k.Paste {
				t.Fatalf("paste %q reads as %q", k.Paste, set)
			}
			buf := set[2]
			if want := []string{"paste-buffer", "-p", "-d", "-b", buf, "-t", target}; !slices.Equal(paste, want) {
				t.Fatalf("paste of %q reads as %q, want %q", k.Paste, paste, want)
			}
			if !bufferRe.MatchString(buf) || seen[buf] || !slices.Contains(buffers, buf) {
				t.Fatalf("buffer %q: malformed, reused or not reported (%q)", buf, buffers)
			}
			seen[buf] = true
		}
		if len(seen) != len(buffers) {
			t.Fatalf("%d buffers reported, %d used", len(buffers), len(seen))
		}
	})
}
