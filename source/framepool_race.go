//go:build race

package source

const (
	// poisonFreedFrames: under the race detector, which every test run uses, freed frame
	// bytes are overwritten, so that a frame read after its last free is caught as wrong
	// config.
	poisonFreedFrames = true
	// minPooledFrame: and every body is pooled, in a buffer of at least the smallest class,
	// so that every test that sends responses, the model's included, goes through the
	// recycling that only large deliveries use in production.
	minPooledFrame = 0
)
