package trust

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// codexTrusted is the line codex writes for a trusted project.
const codexTrusted = `trust_level = "trusted"`

// editCodex sets trust_level = "trusted" in the table [projects."<dir>"]
// of codex's config.toml for each of dirs. It edits the text, so that
// comments and layout stay: the table's trust_level line is replaced, or
// added under its header, or the table is appended. The result is parsed
// again and must hold the same values as before except those set.
func editCodex(data []byte, dirs []string) ([]byte, bool, error) {
	before, err := decodeTOML(data)
	if err != nil {
		return nil, false, err
	}
	projects, err := tomlTable(before, "projects", "projects")
	if err != nil {
		return nil, false, err
	}
	text := string(data)
	changed := false
	for _, dir := range dirs {
		entry, err := tomlTable(projects, dir, fmt.Sprintf("projects.%s", quoteTOML(dir)))
		if err != nil {
			return nil, false, err
		}
		if entry != nil && entry["trust_level"] == "trusted" {
			continue
		}
		if entry == nil {
			if text != "" && !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			if text != "" {
				text += "\n"
			}
			text += "[projects." + quoteTOML(dir) + "]\n" + codexTrusted + "\n"
		} else if text, err = setInTable(text, []string{"projects", dir}); err != nil {
			return nil, false, err
		}
		changed = true
	}
	if !changed {
		return nil, false, nil
	}
	after, err := decodeTOML([]byte(text))
	if err != nil {
		return nil, false, fmt.Errorf("the edited file does not parse (%v); left as it was", err)
	}
	// Nothing but the trust levels may differ: what the file held, with
	// them set, must be what it holds now.
	want, _ := decodeTOML(data)
	if want["projects"] == nil {
		want["projects"] = map[string]any{}
	}
	for _, dir := range dirs {
		p := want["projects"].(map[string]any)
		if p[dir] == nil {
			p[dir] = map[string]any{}
		}
		p[dir].(map[string]any)["trust_level"] = "trusted"
	}
	if !reflect.DeepEqual(want, after) {
		return nil, false, errors.New("the edit would change more than the trust level; left as it was")
	}
	return []byte(text), true, nil
}

// decodeTOML parses a TOML document into plain maps.
func decodeTOML(data []byte) (map[string]any, error) {
	doc := map[string]any{}
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return nil, fmt.Errorf("not valid TOML: %w", err)
	}
	return doc, nil
}

// tomlTable returns the table at key of t (nil when absent); a value
// there that is not a table is an error naming it.
func tomlTable(t map[string]any, key, what string) (map[string]any, error) {
	v, ok := t[key]
	if !ok {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a table", what)
	}
	return m, nil
}

// setInTable sets trust_level = "trusted" in the table whose header is
// exactly path: the key's line is replaced, or the line is added after
// the header.
func setInTable(text string, path []string) (string, error) {
	lines := strings.SplitAfter(text, "\n")
	header := -1
	for i, line := range lines {
		keys, ok := tableHeader(line)
		if ok && header >= 0 {
			break // the next table: the key is not set in ours
		}
		if ok && slices.Equal(keys, path) {
			header = i
			continue
		}
		if header >= 0 {
			if k, _, found := strings.Cut(strings.TrimSpace(line), "="); found {
				if ks, err := parseKey(strings.TrimSpace(k)); err == nil && len(ks) == 1 && ks[0] == "trust_level" {
					indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
					lines[i] = indent + codexTrusted + "\n"
					return strings.Join(lines, ""), nil
				}
			}
		}
	}
	if header < 0 {
		return "", fmt.Errorf("the table projects.%s is not written as its own [projects.%s] header, so pam does not edit it", quoteTOML(path[1]), quoteTOML(path[1]))
	}
	nl := ""
	if !strings.HasSuffix(lines[header], "\n") {
		nl = "\n"
	}
	lines[header] += nl + codexTrusted + "\n"
	return strings.Join(lines, ""), nil
}

// tableHeader reads a line "[a.b."c"]" (not an array of tables) and
// returns its keys.
func tableHeader(line string) ([]string, bool) {
	s := strings.TrimSpace(line)
	if !strings.HasPrefix(s, "[") || strings.HasPrefix(s, "[[") {
		return nil, false
	}
	keys, rest, err := parseKeyPrefix(s[1:])
	if err != nil {
		return nil, false
	}
	rest = strings.TrimSpace(rest)
	if !strings.HasPrefix(rest, "]") {
		return nil, false
	}
	rest = strings.TrimSpace(rest[1:])
	if rest != "" && !strings.HasPrefix(rest, "#") {
		return nil, false
	}
	return keys, true
}

// parseKey reads a whole dotted key.
func parseKey(s string) ([]string, error) {
	keys, rest, err := parseKeyPrefix(s)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(rest) != "" {
		return nil, errors.New("text after the key")
	}
	return keys, nil
}

// parseKeyPrefix reads a dotted key (bare, "basic" or 'literal' parts)
// at the start of s and returns its parts and what follows.
func parseKeyPrefix(s string) ([]string, string, error) {
	var keys []string
	for {
		s = strings.TrimLeft(s, " \t")
		var k string
		switch {
		case strings.HasPrefix(s, `"`):
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, "", errors.New("unterminated string")
			}
			v, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, "", err
			}
			k, s = v, s[end+1:]
		case strings.HasPrefix(s, "'"):
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, "", errors.New("unterminated string")
			}
			k, s = s[1:end+1], s[end+2:]
		default:
			end := 0
			for end < len(s) && isBare(s[end]) {
				end++
			}
			if end == 0 {
				return nil, "", errors.New("no key")
			}
			k, s = s[:end], s[end:]
		}
		keys = append(keys, k)
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, ".") {
			return keys, s, nil
		}
		s = s[1:]
	}
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// quoteTOML writes s as a TOML basic string.
func quoteTOML(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
