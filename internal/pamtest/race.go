//go:build race

package pamtest

// raceEnabled is true when the tests run with -race: the pam binary they
// start is then built with -race as well, so the race detector also
// watches serve, worker and wrapper processes.
const raceEnabled = true
