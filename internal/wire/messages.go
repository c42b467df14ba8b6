package wire

import (
	"unicode"
	"unicode/utf8"
)

// SendMessage is the body of POST /runs/{id}/messages: a message typed
// into the live agent's input and submitted (docs/api.md#messages).
type SendMessage struct {
	Text string `json:"text"`
}

// MessageResult is the answer of POST /runs/{id}/messages.
type MessageResult struct {
	Delivery string `json:"delivery"` // DeliveryConfirmed | DeliveryUnconfirmed
}

// DeliveryConfirmed: the message was seen typed and the screen changed
// after its Enter (docs/api.md#messages).
const DeliveryConfirmed = "confirmed"

// MaxMessageText bounds a message, in characters.
const MaxMessageText = 4096

// TopicRunMessage journals a message delivered into a run (payload text,
// cut to MessageJournalText characters, delivery, actor).
const TopicRunMessage Topic = "run.message"

// MessageJournalText is how much of a message run.message keeps.
const MessageJournalText = 1000

// CheckMessageText checks a message: 1 to MaxMessageText characters of
// UTF-8, printable but for newlines — what a paste may hold (ValidateKeys),
// so no escape sequence and nothing that ends a bracketed paste.
func CheckMessageText(s string) error {
	if s == "" || utf8.RuneCountInString(s) > MaxMessageText {
		return Invalid("text", "text must be 1 to %d characters", MaxMessageText)
	}
	if !utf8.ValidString(s) {
		return Invalid("text", "text is not valid UTF-8")
	}
	for j, r := range s {
		if r != '\n' && !unicode.IsGraphic(r) {
			return Invalid("text", "text holds a control character (%U at byte %d); a message is printable text and newlines", r, j)
		}
	}
	return nil
}
