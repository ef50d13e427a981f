//go:build race

package source

// poisonFreedFrames: under the race detector, which every test run uses, freed frame bytes
// are overwritten, so that a frame read after its last free is caught as wrong config.
const poisonFreedFrames = true
