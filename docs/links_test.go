// Package docs holds pam's own documentation; this test keeps its links
// whole. Source comments and the docs point at sections by their
// anchors (docs/architecture.md#group-commit): a heading renamed or a
// section moved to another file leaves such a link dangling without
// anyone noticing, so every one is checked here against the headings
// as GitHub renders them.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, the parent of this folder.
const root = ".."

// skipDirs are never walked: not ours, or generated.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "dist": true, "testdata": true, "bin": true}

// codeExts are the files whose text may point at a doc.
var codeExts = map[string]bool{".go": true, ".js": true, ".jsx": true, ".mjs": true, ".json": true, ".sh": true}

var (
	heading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	mdLink   = regexp.MustCompile(`\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	inlineMD = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// codeRef is a doc named from code: docs/<name>.md, with an anchor or
	// not, or README.md with an anchor (anything else named README.md is
	// some test repository's file).
	codeRef = regexp.MustCompile(`(docs/[\w.-]+\.md|README\.md)(#[\w-]*)?`)
)

// slug is GitHub's anchor of a heading's text: the rendered text in
// lower case, every character but letters, digits, marks, '_', '-' and
// spaces dropped, spaces made hyphens.
func slug(text string) string {
	text = inlineMD.ReplaceAllString(text, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors reads a markdown file's headings as the set of their anchors
// (a repeated heading gets -1, -2 … as on GitHub).
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// link is one pointer at a doc: where it is written and what it names.
type link struct {
	from   string // file:line
	target string // path from the repository root
	anchor string // without '#'; "" for the file itself
}

// walk calls f for every file of the repository that is not skipped.
func walk(t *testing.T, f func(path string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		f(path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lines calls f with each line of the file at path and its number.
func lines(t *testing.T, path string, f func(n int, line string)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		f(i+1, l)
	}
}

// links gathers every link of the markdown files and every doc reference
// of the code.
func links(t *testing.T) []link {
	var out []link
	walk(t, func(path string) {
		rel, _ := filepath.Rel(root, path)
		switch ext := filepath.Ext(path); {
		case ext == ".md":
			inFence := false
			lines(t, path, func(n int, line string) {
				if fence.MatchString(line) {
					inFence = !inFence
				}
				if inFence {
					return
				}
				for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
					target := m[1]
					if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
						continue
					}
					file, anchor, _ := strings.Cut(target, "#")
					if file == "" {
						file = rel
					} else {
						file = filepath.Join(filepath.Dir(rel), file)
					}
					out = append(out, link{from: fmt.Sprintf("%s:%d", rel, n), target: file, anchor: anchor})
				}
			})
		case codeExts[ext] || filepath.Base(path) == "Makefile":
			lines(t, path, func(n int, line string) {
				for _, m := range codeRef.FindAllStringSubmatch(line, -1) {
					if m[1] == "README.md" && m[2] == "" {
						continue // a file of that name in a test's repository
					}
					out = append(out, link{from: fmt.Sprintf("%s:%d", rel, n), target: m[1], anchor: strings.TrimPrefix(m[2], "#")})
				}
			})
		}
	})
	return out
}

// TestDocLinks fails on every link to a doc, or to a section of one,
// that does not exist: in the docs and the README (markdown links), and
// in the code's comments (docs/<name>.md#<anchor>).
func TestDocLinks(t *testing.T) {
	all := links(t)
	if len(all) < 100 {
		t.Fatalf("found only %d links: is the walk broken?", len(all))
	}
	cache := map[string]map[string]bool{}
	var bad []string
	for _, l := range all {
		path := filepath.Join(root, l.target)
		if _, err := os.Stat(path); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %s does not exist", l.from, l.target))
			continue
		}
		if l.anchor == "" || filepath.Ext(path) != ".md" {
			continue
		}
		if cache[path] == nil {
			cache[path] = anchors(t, path)
		}
		if !cache[path][l.anchor] {
			bad = append(bad, fmt.Sprintf("%s: %s has no section #%s", l.from, l.target, l.anchor))
		}
	}
	slices.Sort(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// TestNoContractSectionNumbers: code says what it follows by pointing at
// docs/ (an anchor and words), never by a section number of the product
// contract, which is not in this repository.
func TestNoContractSectionNumbers(t *testing.T) {
	sign := "\u00a7"
	walk(t, func(path string) {
		ext := filepath.Ext(path)
		if !codeExts[ext] || ext == ".json" {
			return
		}
		rel, _ := filepath.Rel(root, path)
		lines(t, path, func(n int, line string) {
			if strings.Contains(line, sign) {
				t.Errorf("%s:%d cites the contract by section: %s", rel, n, strings.TrimSpace(line))
			}
		})
	})
}

// TestSlug holds the anchor rule to headings of these docs as GitHub
// renders them.
func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"A run's life":                                     "a-runs-life",
		"Working, waiting, hung":                           "working-waiting-hung",
		"pam's tools for the agent":                        "pams-tools-for-the-agent",
		"One-time set-up and `pam doctor`":                 "one-time-set-up-and-pam-doctor",
		"Goals missed on 2 cores, and where the time goes": "goals-missed-on-2-cores-and-where-the-time-goes",
		"[Keys](x.md) and more":                            "keys-and-more",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestEveryPackageInArchitecture: each package under internal/ is named
// in docs/architecture.md (its "Start here" and its Packages table), so
// a newcomer's map has no blank.
func TestEveryPackageInArchitecture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	pkgs := map[string]bool{}
	walk(t, func(path string) {
		rel, _ := filepath.Rel(root, path)
		if strings.HasSuffix(path, ".go") && strings.HasPrefix(rel, "internal"+string(filepath.Separator)) {
			pkgs[filepath.ToSlash(filepath.Dir(rel))] = true
		}
	})
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages: is the walk broken?", len(pkgs))
	}
	for p := range pkgs {
		if !strings.Contains(doc, "`"+p+"`") {
			t.Errorf("package %s is not named in docs/architecture.md", p)
		}
	}
}
