package wire

import (
	"fmt"
	"regexp"
	"strings"
)

// TopicPattern is a compiled topic glob: `*` matches within one
// dot-separated segment ("run.*" matches "run.started", not "run.a.b").
type TopicPattern struct {
	glob string
	re   *regexp.Regexp
}

var topicGlobRe = regexp.MustCompile(`^[a-z0-9_*-]+(\.[a-z0-9_*-]+)*$`)

// ParseTopicGlob validates and compiles a glob. The empty glob matches all.
func ParseTopicGlob(glob string) (*TopicPattern, error) {
	if glob == "" {
		return &TopicPattern{}, nil
	}
	if len(glob) > 200 || !topicGlobRe.MatchString(glob) {
		return nil, fmt.Errorf("topic glob %q: use dot-separated segments of a-z, 0-9, _, - and *", glob)
	}
	return &TopicPattern{glob: glob, re: regexp.MustCompile(GlobRegexp(glob))}, nil
}

// GlobRegexp turns a validated glob into an anchored POSIX regular
// expression usable both by Go and by PostgreSQL's `~` operator.
func GlobRegexp(glob string) string {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(`[^.]*`)
		case '.':
			b.WriteString(`\.`)
		case '-':
			b.WriteString(`\-`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString("$")
	return b.String()
}

// Match reports whether topic matches the pattern.
func (p *TopicPattern) Match(topic string) bool {
	return p == nil || p.re == nil || p.re.MatchString(topic)
}

// Glob is the source text ("" for match-all).
func (p *TopicPattern) Glob() string {
	if p == nil {
		return ""
	}
	return p.glob
}
