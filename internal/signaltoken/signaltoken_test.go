package signaltoken

import (
	"strings"
	"testing"
)

const (
	run  = "5b1d8f34-8a0c-4c83-9d6e-2d7e6d0b1a11"
	host = "0f6c2a57-3e1b-4f7a-8a43-77b1e9b0c2d4"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func TestRoundTrip(t *testing.T) {
	tok := Mint(key, run, 3, host)
	if !strings.HasPrefix(tok, "pst1."+host+".3.") {
		t.Fatalf("token %q does not name its host and attempt", tok)
	}
	h, a, ok := Verify(key, run, tok)
	if !ok || h != host || a != 3 {
		t.Fatalf("Verify = %s %d %v", h, a, ok)
	}
}

func TestRefused(t *testing.T) {
	good := Mint(key, run, 1, host)
	last := good[len(good)-1:]
	flip := map[bool]string{true: "1", false: "0"}[last == "0"]
	for name, c := range map[string]struct {
		key      []byte
		run, tok string
	}{
		"other run":     {key, "6b1d8f34-8a0c-4c83-9d6e-2d7e6d0b1a11", good},
		"other key":     {[]byte("another key"), run, good},
		"forged mac":    {key, run, good[:len(good)-1] + flip},
		"empty":         {key, run, ""},
		"worker token":  {key, run, "pwk_abcdef"},
		"wrong prefix":  {key, run, "pst0" + strings.TrimPrefix(good, "pst1")},
		"host not uuid": {key, run, strings.Replace(good, host, "host-1", 1)},
		"attempt zero":  {key, run, Mint(key, run, 0, host)},
		"attempt not n": {key, run, strings.Replace(good, ".1.", ".x.", 1)},
		"extra part":    {key, run, good + ".x"},
		"other attempt": {key, run, strings.Replace(good, ".1.", ".2.", 1)},
		"other host":    {key, run, strings.Replace(good, host, "1f6c2a57-3e1b-4f7a-8a43-77b1e9b0c2d4", 1)},
	} {
		if h, a, ok := Verify(c.key, c.run, c.tok); ok {
			t.Errorf("%s: %q verifies as host %s attempt %d", name, c.tok, h, a)
		}
	}
}

func TestParseNeedsNoKey(t *testing.T) {
	tok, ok := Parse(Mint(key, run, 2, host))
	if !ok || tok.HostID != host || tok.Attempt != 2 {
		t.Fatalf("Parse = %+v %v", tok, ok)
	}
	if !tok.Good(key, run) || tok.Good(key, "6b1d8f34-8a0c-4c83-9d6e-2d7e6d0b1a11") {
		t.Error("Good does not tell the run the token was minted for")
	}
	if _, ok := Parse("nope"); ok {
		t.Error("a garbage token parses")
	}
}
