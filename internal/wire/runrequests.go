package wire

import (
	"path/filepath"
	"strings"
)

// Validate checks what a run's admission can tell without the database:
// the task id's form, the provider's name, the cwd, prompt and args, the
// attempts and the workspace mode. The task, host and project are checked
// when the run is written; the prompt against the provider's catalog by
// the server.
func (r CreateRun) Validate() error {
	if !ValidUUID(r.TaskID) {
		return Invalid("task_id", "task_id must be the UUID of a task or subtask")
	}
	if !providerRe.MatchString(r.Provider) {
		return Invalid("provider", "provider must match ^[a-z][a-z0-9_-]{0,31}$")
	}
	if r.Cwd != nil {
		cwd := *r.Cwd
		if len(cwd) > 4096 || strings.ContainsRune(cwd, 0) || (cwd != "" && !filepath.IsAbs(cwd)) {
			return Invalid("cwd", "cwd must be an absolute path")
		}
	}
	if r.Prompt != nil {
		if len(*r.Prompt) > MaxPrompt {
			return Invalid("prompt", "prompt must be at most 64 KiB")
		}
		if strings.ContainsRune(*r.Prompt, 0) {
			return Invalid("prompt", "prompt must not contain NUL")
		}
	}
	if err := validateArgs(r.Args); err != nil {
		return err
	}
	if r.MaxAttempts != nil && (*r.MaxAttempts < 1 || *r.MaxAttempts > 20) {
		return Invalid("max_attempts", "max_attempts must be between 1 and 20")
	}
	if r.Workspace != nil && *r.Workspace != WorkspaceWorktree && *r.Workspace != WorkspaceNone {
		return Invalid("workspace", "workspace must be worktree or none")
	}
	return nil
}

func validateArgs(args []string) error {
	if len(args) > 64 {
		return Invalid("args", "at most 64 args")
	}
	for _, a := range args {
		if len(a) > 4096 || strings.ContainsRune(a, 0) {
			return Invalid("args", "each arg must be at most 4096 bytes without NUL")
		}
	}
	return nil
}

// Validate checks a continue's text and provider name; whether the run
// may be continued is the run's state's to say.
func (r ContinueRun) Validate() error {
	if r.Text != nil {
		if err := CheckContinueText(*r.Text); err != nil {
			return err
		}
	}
	if r.Provider != nil && !providerRe.MatchString(*r.Provider) {
		return Invalid("provider", "provider must match ^[a-z][a-z0-9_-]{0,31}$")
	}
	return nil
}

// ValidProviderName reports whether name is a provider's name:
// ^[a-z][a-z0-9_-]{0,31}$.
func ValidProviderName(name string) bool { return providerRe.MatchString(name) }
