package store

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A database that is away reads as ErrUnavailable, and the cause stays
// reachable through it (errors.As/Is), so a caller can still ask what
// exactly failed; a wrong query is not "unavailable".
func TestTranslateKeepsTheCause(t *testing.T) {
	shutdown := &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}
	for _, c := range []struct {
		name  string
		err   error
		away  bool
		cause error
	}{
		{"admin shutdown", fmt.Errorf("query: %w", shutdown), true, shutdown},
		{"refused", &pgconn.ConnectError{}, true, nil},
		{"socket gone", fmt.Errorf("dial: %w", syscall.ENOENT), true, syscall.ENOENT},
		{"torn stream", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, io.ErrUnexpectedEOF},
		{"conn closed", pgconn.ErrConnClosed, true, pgconn.ErrConnClosed},
		{"cancelled query", &pgconn.PgError{Code: "57014"}, false, nil},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false, nil},
	} {
		got := translate(c.err)
		if errors.Is(got, ErrUnavailable) != c.away {
			t.Errorf("%s: unavailable = %v, want %v (%v)", c.name, !c.away, c.away, got)
		}
		if c.cause != nil && !errors.Is(got, c.cause) {
			t.Errorf("%s: the cause is lost: %v", c.name, got)
		}
		var pe *pgconn.PgError
		if errors.As(c.err, &pe) && !errors.As(got, &pe) {
			t.Errorf("%s: errors.As no longer finds the *pgconn.PgError", c.name)
		}
	}
}
