package provider

import (
	"fmt"
	"maps"
	"slices"

	"pam/internal/screen"
)

// Screens are a provider's screen patterns ([providers.NAME.screens],
// docs/architecture.md#the-screen-is-read): regular expressions (Go's
// syntax) matched against each line of the plain screen's bottom block.
// Without any, the generic set still applies.
type Screens struct {
	// NeedsInput: a question waits for a person.
	NeedsInput []string
	// Working: the agent is busy; never a question, never idle.
	Working []string
	// RateLimited: the provider's usage limit stopped the agent.
	RateLimited []string
}

// merged is s with the lists the file sets replacing its own.
func (s Screens) merged(f fileScreens) Screens {
	if f.NeedsInput != nil {
		s.NeedsInput = slices.Clone(*f.NeedsInput)
	}
	if f.Working != nil {
		s.Working = slices.Clone(*f.Working)
	}
	if f.RateLimited != nil {
		s.RateLimited = slices.Clone(*f.RateLimited)
	}
	return s
}

func (s Screens) clone() Screens {
	return Screens{NeedsInput: slices.Clone(s.NeedsInput), Working: slices.Clone(s.Working), RateLimited: slices.Clone(s.RateLimited)}
}

// builtinScreens are what the built-in CLIs show, in the wording of the
// pinned releases (Claude Code 2.1.197, codex 0.171.0, gemini-cli
// 0.61.0); they are tested against captures of the real CLIs
// (screen/testdata and agentrig/testdata/screens,
// TestBuiltinScreensOnRealCLIs and TestBuiltinScreensOnAgentRigCaptures).
var builtinScreens = map[string]Screens{
	"claude": {
		NeedsInput: []string{
			`Do you want to proceed\?`, // a tool's permission
			`Do you want to (?:make this edit to|create|overwrite|write to|delete) `, // a file's
			`Do you trust the files in this folder\?`,                                // folder trust (earlier releases)
			`Quick safety check`, `Is this a project you created or one you trust`, // folder trust
			`Do you want to use this API key\?`, // ANTHROPIC_API_KEY's first use
			`Select login method`,               // login
		},
		Working: []string{`esc to interrupt`},
		RateLimited: []string{`(?i)usage limit reached`, `\d+-hour limit reached`, `limit reached\s*[∙·•]\s*resets`, `You[’']ve hit your [\w ]{0,24}limit`,
			// A 429 with an API key, or as a subscriber when the server
			// limits requests: the turn ends with this line.
			`API Error: (?:Request rejected \(429\)|Server is temporarily limiting requests)`},
	},
	"codex": {
		NeedsInput: []string{
			`Allow command\?`, `Would you like to run the following command\?`, `Would you like to make the following edits\?`,
			`Would you like to grant these permissions\?`,
			`Do you trust the contents of this directory`, `Trust this folder\?`, // folder trust (0.171.0 asks the latter)
			`Sign in with ChatGPT`, `Choose how you want to use Codex`, `Use your own OpenAI API key`, // login
		},
		Working:     []string{`esc to interrupt`},
		RateLimited: []string{`You[’']ve hit your usage limit`},
	},
	"gemini": {
		NeedsInput: []string{
			`Do you trust (?:the files in )?this folder\?`, // folder trust
			`Allow execution`, `Apply this change\?`, `Do you want to proceed\?`,
			`How would you like to authenticate`, `Please enter your Gemini API key`, // login
		},
		Working:     []string{`esc to cancel`},
		RateLimited: []string{`Quota exceeded`, `(?i)usage limit reached`, `exhausted your daily quota`},
	},
}

// compileScreens compiles every provider's screens; the error names the
// file, the provider, the key and the pattern.
func (c *Catalog) compileScreens(path string) error {
	c.patterns = map[string]*screen.Patterns{}
	for _, name := range slices.Sorted(maps.Keys(c.providers)) {
		s := c.providers[name].Screens
		p, err := screen.Compile(s.NeedsInput, s.Working, s.RateLimited)
		if err != nil {
			where := "built-in providers." + name
			if path != "" {
				where = path + ": providers." + name
			}
			return fmt.Errorf("%s.screens.%w", where, err)
		}
		c.patterns[name] = p
	}
	return nil
}

// Patterns are the named provider's compiled screens; nil for a provider
// the catalog does not know (the generic set alone applies).
func (c *Catalog) Patterns(name string) *screen.Patterns { return c.patterns[name] }
