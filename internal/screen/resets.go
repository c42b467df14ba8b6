package screen

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A usage-limit message names when the limit resets in one of a few
// ways, after a word that says so: "resets 3pm", "resets at 15:00",
// "try again at 3:00 PM", "try again in 2 hours 5 minutes", "resets Dec
// 3, 4:27 PM", "resets 2026-12-03T15:00:00Z", a zone in parentheses after
// a local time ("3pm (Europe/Berlin)").
var (
	resetWord = regexp.MustCompile(`(?i)\b(?:resets?|try again|available again|retry after|retry at|until)\b`)
	isoTime   = regexp.MustCompile(`^\s*(?:at\s+|on\s+)?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)`)
	relTime   = regexp.MustCompile(`(?i)^\s*in\s+((?:\d+\s*(?:days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b[\s,]*(?:and\s+)?)+)`)
	relPart   = regexp.MustCompile(`(?i)(\d+)\s*(d|h|m|s)`)
	dateTime  = regexp.MustCompile(`(?i)^\s*(?:at\s+|on\s+)?(?:[a-z]+day,?\s+)?(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?(?:\s+(\d{4}))?,?\s+(?:at\s+)?(\d{1,2})(?::(\d{2}))?\s*([ap])?\.?(?:m\b\.?)?`)
	clockTime = regexp.MustCompile(`(?i)^\s*(?:at\s+)?(\d{1,2})(?::(\d{2}))?\s*(?:([ap])\.?m\b\.?)?`)
	zoneName  = regexp.MustCompile(`^\s*\(([A-Za-z]+(?:/[A-Za-z0-9_+\-]+)+|UTC|GMT)\)`)
)

var months = map[string]time.Month{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}

// resetsAt reads when a usage limit resets from its message: the first
// time named after a reset word. A local time is in loc (or the zone the
// message names), the next such time after now; nil when no time is
// named.
func resetsAt(msg string, now time.Time, loc *time.Location) *time.Time {
	if loc == nil {
		loc = time.UTC
	}
	for _, at := range resetWord.FindAllStringIndex(msg, 4) {
		if t, ok := timeAfter(msg[at[1]:], now, loc); ok {
			t = t.UTC()
			return &t
		}
	}
	return nil
}

// timeAfter reads the time at the start of s.
func timeAfter(s string, now time.Time, loc *time.Location) (time.Time, bool) {
	if m := isoTime.FindStringSubmatch(s); m != nil {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04Z07:00", "2006-01-02T15:04:05Z0700"} {
			if t, err := time.ParseInLocation(layout, m[1], loc); err == nil {
				return t, true
			}
		}
		return time.Time{}, false
	}
	if m := relTime.FindStringSubmatch(s); m != nil {
		var d time.Duration
		for _, p := range relPart.FindAllStringSubmatch(m[1], -1) {
			n, err := strconv.Atoi(p[1])
			if err != nil || n > 10000 {
				return time.Time{}, false
			}
			unit := map[string]time.Duration{"d": 24 * time.Hour, "h": time.Hour, "m": time.Minute, "s": time.Second}[strings.ToLower(p[2])]
			d += time.Duration(n) * unit
		}
		if d <= 0 {
			return time.Time{}, false
		}
		return now.Add(d).Truncate(time.Second), true
	}
	if m := dateTime.FindStringIndex(s); m != nil {
		g := dateTime.FindStringSubmatch(s)
		loc = zoneAfter(s[m[1]:], loc)
		h, min, ok := clock(g[4], g[5], g[6])
		day, _ := strconv.Atoi(g[2])
		if !ok || day < 1 || day > 31 {
			return time.Time{}, false
		}
		local := now.In(loc)
		year := local.Year()
		if g[3] != "" {
			year, _ = strconv.Atoi(g[3])
		}
		t := time.Date(year, months[strings.ToLower(g[1])], day, h, min, 0, 0, loc)
		if g[3] == "" && !t.After(now) {
			t = t.AddDate(1, 0, 0)
		}
		return t, true
	}
	if m := clockTime.FindStringIndex(s); m != nil {
		g := clockTime.FindStringSubmatch(s)
		if g[2] == "" && g[3] == "" {
			return time.Time{}, false // a bare number is no time
		}
		loc = zoneAfter(s[m[1]:], loc)
		h, min, ok := clock(g[1], g[2], g[3])
		if !ok {
			return time.Time{}, false
		}
		local := now.In(loc)
		t := time.Date(local.Year(), local.Month(), local.Day(), h, min, 0, 0, loc)
		if !t.After(now) {
			t = t.AddDate(0, 0, 1)
		}
		return t, true
	}
	return time.Time{}, false
}

// clock reads an hour, minutes and an a/p of am/pm.
func clock(hs, ms, ampm string) (int, int, bool) {
	h, err := strconv.Atoi(hs)
	if err != nil {
		return 0, 0, false
	}
	m := 0
	if ms != "" {
		if m, err = strconv.Atoi(ms); err != nil || m > 59 {
			return 0, 0, false
		}
	}
	switch strings.ToLower(ampm) {
	case "a":
		if h < 1 || h > 12 {
			return 0, 0, false
		}
		h %= 12
	case "p":
		if h < 1 || h > 12 {
			return 0, 0, false
		}
		h = h%12 + 12
	default:
		if h > 23 {
			return 0, 0, false
		}
	}
	return h, m, true
}

// zoneAfter is the zone named in parentheses at the start of s, or loc.
func zoneAfter(s string, loc *time.Location) *time.Location {
	if m := zoneName.FindStringSubmatch(s); m != nil {
		if z, err := time.LoadLocation(m[1]); err == nil {
			return z
		}
	}
	return loc
}
