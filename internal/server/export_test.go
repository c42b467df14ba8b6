package server

import "context"

// FramesPerSecond bounds an attach client's data frames in any second,
// for the tests of package server_test.
const FramesPerSecond = framesPerSecond

// FlushOutputs writes the pane changes noted for runID now, as an
// attention change of that run does first: a test that sets an
// attention through the store directly orders it after them.
func (s *Server) FlushOutputs(ctx context.Context, runID string) { s.outputs.flushRun(ctx, runID) }

// AnswersChecked is how many answers (keys, attach input) to runID were
// checked to the end: a test waits for it instead of for time to pass.
func (s *Server) AnswersChecked(runID string) int { return s.answers.done(runID) }

// RouteRoleEntry is a route's entry in the role table, and whether it
// has one (a route without one is admin-only).
func RouteRoleEntry(pattern string) (string, bool) {
	role, ok := routeRoles[pattern]
	return role, ok
}
