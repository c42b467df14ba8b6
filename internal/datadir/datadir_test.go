package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteTokenMode0600(t *testing.T) {
	dir := t.TempDir()
	tok, err := NewToken()
	if err != nil || !ValidToken(tok) {
		t.Fatalf("new token %q is not 32 lowercase hex (%v)", tok, err)
	}
	// Over a file left too open: the replacement is 0600 all the same.
	if err := os.WriteFile(TokenPath(dir), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteToken(dir, tok); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(TokenPath(dir))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, err %v", st.Mode().Perm(), err)
	}
	if got, err := ReadToken(dir); err != nil || got != tok {
		t.Fatalf("read back %q (%v), want %q", got, err, tok)
	}
	if err := WriteToken(dir, "short"); err == nil {
		t.Fatal("a token of the wrong shape was written")
	}
	if got, _ := ReadToken(dir); got != tok {
		t.Fatalf("a refused write changed the file to %q", got)
	}
}

func TestTokenFileHostileContent(t *testing.T) {
	for _, content := range []string{"", "short", strings.Repeat("A", 32), strings.Repeat("g", 32), strings.Repeat("a", 33), "\x00\x01"} {
		dir := t.TempDir()
		if err := os.WriteFile(TokenPath(dir), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadToken(dir); err == nil || !strings.Contains(err.Error(), "32 lowercase hex") {
			t.Errorf("content %q: err %v, want a clear refusal", content, err)
		}
		// Reading never rewrites the operator's file.
		if b, _ := os.ReadFile(TokenPath(dir)); string(b) != content {
			t.Errorf("content %q was rewritten to %q", content, b)
		}
	}
}

func TestTokenModeRepaired(t *testing.T) {
	dir := t.TempDir()
	tok := strings.Repeat("ab", 16)
	if err := os.WriteFile(TokenPath(dir), []byte(tok+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadToken(dir)
	if err != nil || got != tok {
		t.Fatalf("read %q %v", got, err)
	}
	if st, _ := os.Stat(TokenPath(dir)); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode not repaired: %v", st.Mode().Perm())
	}
}

func TestEnsureModes(t *testing.T) {
	base := t.TempDir()
	for _, c := range []struct {
		traversable bool
		want        os.FileMode
	}{{false, 0o700}, {true, 0o711}} {
		dir := filepath.Join(base, "d", "data")
		if err := Ensure(dir, c.traversable); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(dir); st.Mode().Perm() != c.want {
			t.Errorf("traversable=%v: mode %v, want %v", c.traversable, st.Mode().Perm(), c.want)
		}
	}
}

func TestLockExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.lock")
	l, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = TryLock(path)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second lock: %v, want ErrLocked naming the pid", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := TryLock(path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	l2.Unlock()
}

// ReplaceFile, like WriteFileAtomic, replaces a file whole with the mode
// asked for and leaves no temp file behind.
func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.json")
	if err := os.WriteFile(path, []byte("old content, longer than the new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, write := range []func(string, []byte, os.FileMode) error{ReplaceFile, WriteFileAtomic} {
		if err := write(path, []byte("new\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != "new\n" {
			t.Fatalf("after the write: %q (%v)", got, err)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("after the write: %v (%v), want mode 0600", st, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("left behind: %v", entries)
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
