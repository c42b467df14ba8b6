package wire

import "strings"

// MaxIDPrefixMatches is how many objects a list filtered by id_prefix
// holds at most (docs/api.md#finding-an-object-by-id-prefix): enough to
// tell a unique prefix from an ambiguous one and to show the candidates,
// never a dump of a table.
const MaxIDPrefixMatches = 10

// uuidFirst and uuidLast are the smallest and the largest UUID in the
// canonical form; a prefix replaces their beginning.
const (
	uuidFirst = "00000000-0000-0000-0000-000000000000"
	uuidLast  = "ffffffff-ffff-ffff-ffff-ffffffffffff"
)

// IDPrefix is the beginning of a UUID as pam prints it (lowercase hex,
// dashes where the canonical form has them), held as the range of the
// UUIDs that start with it. A range, not a LIKE pattern: the database
// answers it from the primary key's index, and no character of the
// operator's input ever reaches a pattern.
type IDPrefix struct {
	Prefix      string
	First, Last string
}

// ParseIDPrefix checks that s can begin a UUID (1 to 36 characters, hex
// digits, a dash exactly where the canonical form has one; upper case is
// read as lower case) and returns its range. Anything else — a LIKE
// wildcard, a space, a 37th character — is 400 validation_failed naming
// id_prefix.
func ParseIDPrefix(s string) (IDPrefix, error) {
	s = strings.ToLower(s)
	if len(s) == 0 || len(s) > len(uuidFirst) {
		return IDPrefix{}, Invalid("id_prefix", "id_prefix must be 1 to %d characters of a UUID", len(uuidFirst))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
		if uuidFirst[i] == '-' {
			ok = c == '-'
		}
		if !ok {
			return IDPrefix{}, Invalid("id_prefix", "id_prefix must be the beginning of a UUID (hex digits, and dashes where a UUID has them)")
		}
	}
	return IDPrefix{Prefix: s, First: s + uuidFirst[len(s):], Last: s + uuidLast[len(s):]}, nil
}
