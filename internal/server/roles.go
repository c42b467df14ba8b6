package server

import (
	"net/http"

	"pam/internal/wire"
)

// Roles are checked here and nowhere else (docs/architecture.md#security-model):
// routeRoles maps every authenticated route, as its mux pattern, to the
// weakest role that may use it. operatorAuth and socket look the
// request's pattern up after authenticating it and refuse a weaker token
// with 403 forbidden. A pattern missing from the table is admin-only
// (fail closed), and TestRolesCoverEveryOperation walks every operation of
// openapi.json through the table, so a route added without an entry fails
// that test before it can be refused to everyone but admin.
//
// viewer: reads, the event stream, watching a pane. operator: also
// projects, work items, runs and their terminal (keys, messages, attach
// and its lease, push). admin: also hosts, tokens and notifications, and
// Go's profiles of the server.
var routeRoles = map[string]string{
	"GET /api/v1/projects":                      wire.RoleViewer,
	"POST /api/v1/projects":                     wire.RoleOperator,
	"GET /api/v1/projects/{ref}":                wire.RoleViewer,
	"PATCH /api/v1/projects/{ref}":              wire.RoleOperator,
	"DELETE /api/v1/projects/{ref}":             wire.RoleOperator,
	"POST /api/v1/projects/{ref}/unarchive":     wire.RoleOperator,
	"GET /api/v1/projects/{ref}/work-items":     wire.RoleViewer,
	"POST /api/v1/projects/{ref}/work-items":    wire.RoleOperator,
	"GET /api/v1/work-items":                    wire.RoleViewer,
	"GET /api/v1/work-items/{id}":               wire.RoleViewer,
	"PATCH /api/v1/work-items/{id}":             wire.RoleOperator,
	"DELETE /api/v1/work-items/{id}":            wire.RoleOperator,
	"GET /api/v1/events":                        wire.RoleViewer,
	"GET /api/v1/events/stream":                 wire.RoleViewer,
	"GET /api/v1/hosts":                         wire.RoleViewer,
	"POST /api/v1/hosts":                        wire.RoleAdmin,
	"GET /api/v1/hosts/{ref}":                   wire.RoleViewer,
	"PATCH /api/v1/hosts/{ref}":                 wire.RoleAdmin,
	"POST /api/v1/hosts/{ref}/disable":          wire.RoleAdmin,
	"POST /api/v1/hosts/{ref}/enable":           wire.RoleAdmin,
	"POST /api/v1/hosts/{ref}/clear-suspect":    wire.RoleAdmin,
	"POST /api/v1/hosts/{ref}/rotate-token":     wire.RoleAdmin,
	"DELETE /api/v1/hosts/{ref}":                wire.RoleAdmin,
	"GET /api/v1/providers":                     wire.RoleViewer,
	"POST /api/v1/runs":                         wire.RoleOperator,
	"GET /api/v1/runs":                          wire.RoleViewer,
	"GET /api/v1/runs/{id}":                     wire.RoleViewer,
	"POST /api/v1/runs/{id}/stop":               wire.RoleOperator,
	"POST /api/v1/runs/{id}/retry":              wire.RoleOperator,
	"POST /api/v1/runs/{id}/continue":           wire.RoleOperator,
	"POST /api/v1/runs/{id}/complete":           wire.RoleOperator,
	"POST /api/v1/runs/{id}/keys":               wire.RoleOperator,
	"POST /api/v1/runs/{id}/messages":           wire.RoleOperator,
	"GET /api/v1/runs/{id}/pane":                wire.RoleViewer,
	"GET /api/v1/runs/{id}/logs":                wire.RoleViewer,
	"GET /api/v1/runs/{id}/events":              wire.RoleViewer,
	"GET /api/v1/runs/{id}/diff":                wire.RoleViewer,
	"POST /api/v1/runs/{id}/push":               wire.RoleOperator,
	"DELETE /api/v1/runs/{id}/workspace":        wire.RoleOperator,
	"GET /api/v1/openapi.json":                  wire.RoleViewer,
	"POST /api/v1/ws-tickets":                   wire.RoleViewer, // an attach ticket: see createWSTicket
	"DELETE /api/v1/runs/{id}/lease":            wire.RoleOperator,
	"GET /api/v1/runs/{id}/pane/ws":             wire.RoleViewer,
	"GET /api/v1/runs/{id}/attach/ws":           wire.RoleOperator,
	"GET /api/v1/tokens":                        wire.RoleAdmin,
	"POST /api/v1/tokens":                       wire.RoleAdmin,
	"GET /api/v1/tokens/self":                   wire.RoleViewer,
	"POST /api/v1/tokens/{id}/rotate":           wire.RoleAdmin,
	"DELETE /api/v1/tokens/{id}":                wire.RoleAdmin,
	"GET /api/v1/notifications":                 wire.RoleAdmin,
	"POST /api/v1/notifications":                wire.RoleAdmin,
	"GET /api/v1/notifications/{id}":            wire.RoleAdmin,
	"PATCH /api/v1/notifications/{id}":          wire.RoleAdmin,
	"DELETE /api/v1/notifications/{id}":         wire.RoleAdmin,
	"POST /api/v1/notifications/{id}/test":      wire.RoleAdmin,
	"GET /api/v1/notifications/{id}/deliveries": wire.RoleAdmin,
	// An answer URL's single-use token is its own credential: no bearer
	// token, no role.
	"POST /api/v1/answers/{token}": rolePublic,
	// Anything else under /api/v1 answers 404 or 405 to any token.
	"/api/v1/":                 wire.RoleViewer,
	"GET /metrics":             wire.RoleViewer,
	"GET /debug/pprof/":        wire.RoleAdmin,
	"GET /debug/pprof/profile": wire.RoleAdmin,
	"GET /debug/pprof/trace":   wire.RoleAdmin,
	"GET /debug/pprof/symbol":  wire.RoleAdmin,
}

// rolePublic marks a route that takes no bearer token at all.
const rolePublic = "public"

// RouteRole is the weakest role that may use the route of a mux pattern
// ("POST /api/v1/runs/{id}/keys"): its entry in the table, admin when it
// has none.
func RouteRole(pattern string) string {
	if role, ok := routeRoles[pattern]; ok {
		return role
	}
	return wire.RoleAdmin
}

// RoleAllows reports whether a token of role may use the route of pattern.
func RoleAllows(role, pattern string) bool {
	need := RouteRole(pattern)
	return need == rolePublic || wire.RoleRank(role) >= wire.RoleRank(need)
}

// forbidden is the refusal of r's route to a token of role.
func forbidden(role string, r *http.Request) error {
	return wire.Errorf(wire.CodeForbidden, "a %s token may not %s %s: it needs the %s role",
		role, r.Method, r.URL.Path, RouteRole(r.Pattern)).With("role", role).With("required", RouteRole(r.Pattern))
}
