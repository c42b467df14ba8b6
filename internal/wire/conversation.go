package wire

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Conversations (docs/architecture.md#resume-and-continue): the agent
// CLI's own session id, as its hooks report it, lets a new attempt or a
// continuation resume the conversation instead of starting afresh.

// MaxAgentSessionID bounds an agent session id.
const MaxAgentSessionID = 200

// PayloadAgentSessionID is the key of a signal's payload that carries the
// CLI's session id: every `pam hook` puts it there, once per attempt and
// whenever it changes, and the server records it (runs.agent_session_id)
// whatever the signal's kind.
const PayloadAgentSessionID = "agent_session_id"

// ValidAgentSessionID checks a session id before it is stored or reaches
// a CLI's argv: 1 to MaxAgentSessionID printable ASCII characters, no
// space, and not starting with "-" (a CLI would read it as an option).
// Claude Code's, codex's and gemini's are UUIDs.
func ValidAgentSessionID(id string) error {
	if id == "" || len(id) > MaxAgentSessionID || !printableASCII(id) || strings.HasPrefix(id, "-") {
		return Invalid("payload."+PayloadAgentSessionID,
			"agent_session_id must be 1 to %d printable ASCII characters without spaces, not starting with '-'", MaxAgentSessionID)
	}
	return nil
}

// AgentSessionOf reads the session id a signal's payload carries: "" when
// it carries none (no payload, not an object, or no such key); an error
// naming payload.agent_session_id when it carries one that is not a valid
// id (not a string, or refused by ValidAgentSessionID).
func AgentSessionOf(payload json.RawMessage) (string, error) {
	if len(payload) == 0 {
		return "", nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) != nil {
		return "", nil
	}
	raw, ok := m[PayloadAgentSessionID]
	if !ok {
		return "", nil
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", Invalid("payload."+PayloadAgentSessionID, "agent_session_id must be a string")
	}
	if err := ValidAgentSessionID(id); err != nil {
		return "", err
	}
	return id, nil
}

// CodeNotResumable refuses POST /runs/{id}/continue of a run whose
// conversation cannot be resumed: no agent session was reported, its
// provider has no resume_args on the run's host, or its worktree is gone.
const CodeNotResumable = "not_resumable"

// Conversation event topics: run.agent_session when a run's session id is
// set or changes (payload agent_session_id, and from: the one before, or
// null), run.continued on a run that a new run continues (payload run_id:
// the new run).
const (
	TopicRunAgentSession Topic = "run.agent_session"
	TopicRunContinued    Topic = "run.continued"
)

// RetryRun is the body of POST /runs/{id}/retry: Fresh starts the new
// attempt afresh, with the prompt, instead of resuming the conversation.
type RetryRun struct {
	Fresh bool `json:"fresh,omitempty"`
}

// ContinueRun is the body of POST /runs/{id}/continue: Text is the
// message the resumed agent gets (absent: the provider's
// continue_message); Provider, when set, is the catalog entry the new run
// uses instead of the old run's (one that resumes the same CLI's
// conversations).
type ContinueRun struct {
	Text     *string `json:"text,omitempty"`
	Provider *string `json:"provider,omitempty"`
}

// MaxContinueText bounds the text of a continue, in characters, as a
// message's.
const MaxContinueText = 4096

// CheckContinueText checks a continue's text: 1 to MaxContinueText
// characters of UTF-8 without NUL (newlines allowed).
func CheckContinueText(s string) error {
	if s == "" || utf8.RuneCountInString(s) > MaxContinueText || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return Invalid("text", "text must be 1 to %d characters of UTF-8 without NUL", MaxContinueText)
	}
	return nil
}
