//go:build race

package helm

// raceEnabled: the tests run with the race detector, and so is the bridge built.
const raceEnabled = true
