package wire

import "testing"

// TestRepoURLValidation: what reaches git's argv as a URL is never an
// option, never a remote helper, and never carries credentials.
func TestRepoURLValidation(t *testing.T) {
	ok := []string{
		"https://github.com/o/r.git", "ssh://git@github.com/o/r.git", "git@github.com:o/r.git",
		"git://example.com/r", "file:///srv/repos/r.git", "/srv/repos/r.git", "http://127.0.0.1:8080/r",
	}
	for _, u := range ok {
		if err := ValidateRepoURL(u); err != nil {
			t.Errorf("%q refused: %v", u, err)
		}
	}
	bad := []string{
		"", "-uhello", "--upload-pack=touch /tmp/pwned", "ext::sh -c touch% /tmp/x", "ext::ssh", "fd::17",
		"https://user:secret@github.com/o/r.git", "https://ghp_token@github.com/o/r.git", "ssh://u:p@h/r",
		"u:p@host:r", "relative/path", "ftp://x/r", "https://x/r with space", "/srv/a\nb",
	}
	for _, u := range bad {
		if err := ValidateRepoURL(u); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

// TestRefValidation follows git check-ref-format, and never a leading '-'.
func TestRefValidation(t *testing.T) {
	for _, r := range []string{"main", "release/1.2", "pam/fix-login-0a0a0a0a", "v1.0.0"} {
		if err := ValidateRef("base", r); err != nil {
			t.Errorf("%q refused: %v", r, err)
		}
	}
	for _, r := range []string{"", "-main", "a/-b", "a..b", "a b", "a~1", "a^", "a:b", "@", "a@{1}", "x.lock", "/a", "a/", ".a", "a//b", "a\\b", "a*"} {
		if err := ValidateRef("base", r); err == nil {
			t.Errorf("%q accepted", r)
		}
	}
}
