//go:build !race

package pamtest

// raceEnabled is false without -race; see race.go.
const raceEnabled = false
