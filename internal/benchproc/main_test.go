package benchproc

import (
	"testing"

	"go.uber.org/goleak"
)

// A started process's waiter and log reader end with it: no goroutine
// outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
