package mcpserver

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"pam/internal/wrap"
)

// Run is the run `pam mcp` acts for: what `pam exec run` puts in the
// environment of the CLI it starts, which the CLI passes on to the MCP
// servers it starts.
type Run struct {
	ID      string
	Attempt int
	// APIURL is where the orchestrator is (PAM_API_URL).
	APIURL string
	// Token is the run's signal token (PAM_SIGNAL_TOKEN).
	Token string
	// CAFile is an extra CA bundle for APIURL (PAM_CA_FILE), or "".
	CAFile string
}

// ErrNotInRun is the error of RunFromEnv outside a run: none of the run's
// variables is set.
var ErrNotInRun = errors.New("not inside a pam run: PAM_RUN_ID, PAM_ATTEMPT, PAM_API_URL and PAM_SIGNAL_TOKEN are unset. " +
	"pam mcp is the MCP server pam gives the agent CLI of a run (pam exec run sets them); it is not a command for people")

// RunFromEnv reads the run from the environment (getenv as os.Getenv).
// Some CLIs withhold variables named like secrets from the MCP servers
// they start (gemini drops *TOKEN*): without PAM_SIGNAL_TOKEN, the token
// is read from the run's dispatch file in PAM_WORKER_DATA_DIR, if it is
// of the same attempt.
func RunFromEnv(getenv func(string) string) (Run, error) {
	r := Run{ID: getenv("PAM_RUN_ID"), APIURL: getenv("PAM_API_URL"), Token: getenv("PAM_SIGNAL_TOKEN"), CAFile: getenv("PAM_CA_FILE")}
	attempt := getenv("PAM_ATTEMPT")
	if r.ID == "" && attempt == "" && r.APIURL == "" && r.Token == "" {
		return Run{}, ErrNotInRun
	}
	if id, err := uuid.Parse(r.ID); err != nil || id.String() != r.ID {
		return Run{}, fmt.Errorf("PAM_RUN_ID %q is not a run id", r.ID)
	}
	n, err := strconv.Atoi(attempt)
	if err != nil || n < 1 {
		return Run{}, fmt.Errorf("PAM_ATTEMPT %q is not an attempt (1 or more)", attempt)
	}
	r.Attempt = n
	if u, err := url.Parse(r.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Run{}, fmt.Errorf("PAM_API_URL %q is not an http(s) URL", r.APIURL)
	}
	if r.Token == "" {
		dir := getenv("PAM_WORKER_DATA_DIR")
		if dir == "" {
			return Run{}, errors.New("PAM_SIGNAL_TOKEN is unset, and so is PAM_WORKER_DATA_DIR, where the run's dispatch file would hold it")
		}
		d, err := wrap.ReadDispatch(dir, r.ID)
		if err != nil {
			return Run{}, fmt.Errorf("PAM_SIGNAL_TOKEN is unset, and the run's dispatch file cannot say it: %w", err)
		}
		if d.Attempt != r.Attempt {
			return Run{}, fmt.Errorf("PAM_SIGNAL_TOKEN is unset, and the run's dispatch file is of attempt %d, not %d", d.Attempt, r.Attempt)
		}
		r.Token = d.SignalToken
		if r.CAFile == "" {
			r.CAFile = d.CAFile
		}
	}
	return r, nil
}
