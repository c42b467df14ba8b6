package embeddb

import (
	"testing"

	"go.uber.org/goleak"

	"pam/internal/pamtest"
)

// TestMain fails the package when a goroutine outlives its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pamtest.M(m)) }
