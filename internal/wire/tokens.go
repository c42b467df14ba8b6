package wire

import "time"

// Roles of named API tokens (docs/architecture.md#security-model), weakest
// first: a route's minimum role admits that role and every stronger one.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
	RoleAdmin    = "admin"
)

// AdminTokenName is the name of the admin token the operator token of a
// database from before named tokens is adopted as.
const AdminTokenName = "admin"

// RoleRank orders roles: viewer 1, operator 2, admin 3, anything else 0.
func RoleRank(role string) int {
	switch role {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Token is a named API token as the API shows it: never its secret.
type Token struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// CreateToken is the body of POST /tokens.
type CreateToken struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

// TokenSecret answers POST /tokens and POST /tokens/{id}/rotate: the only
// time the secret is shown.
type TokenSecret struct {
	Token  Token  `json:"token"`
	Secret string `json:"secret"`
}

// TokenList answers GET /tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}
