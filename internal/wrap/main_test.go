package wrap

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its tests: Run's
// waiter for the CLI and its signal sender must end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
