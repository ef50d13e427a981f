//go:build !race

package source

const (
	poisonFreedFrames = false
	// minPooledFrame is the smallest body encodeFrame puts in pooled bytes: below it, a body
	// is one of many small responses (a single change) that the allocator serves well.
	minPooledFrame = 64 << 10
)
