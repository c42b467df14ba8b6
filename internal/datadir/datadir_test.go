package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenCreatedOnceWithMode0600(t *testing.T) {
	dir := t.TempDir()
	tok, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ValidToken(tok) {
		t.Fatalf("token %q is not 32 lowercase hex", tok)
	}
	st, err := os.Stat(TokenPath(dir))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, err %v", st.Mode().Perm(), err)
	}
	again, err := LoadOrCreateToken(dir)
	if err != nil || again != tok {
		t.Fatalf("second start changed the token: %q -> %q (%v)", tok, again, err)
	}
}

func TestTokenFileHostileContent(t *testing.T) {
	for _, content := range []string{"", "short", strings.Repeat("A", 32), strings.Repeat("g", 32), strings.Repeat("a", 33), "\x00\x01"} {
		dir := t.TempDir()
		if err := os.WriteFile(TokenPath(dir), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateToken(dir); err == nil || !strings.Contains(err.Error(), "32 lowercase hex") {
			t.Errorf("content %q: err %v, want a clear refusal", content, err)
		}
		// The operator's file is never replaced behind their back.
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
