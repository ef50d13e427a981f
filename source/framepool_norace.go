//go:build !race

package source

const (
	poisonFreedFrames = false
	// minPooledFrame is the smallest body encodeFrame puts in pooled bytes: the parts of a
	// large delivery (up to xds.max_response_size, 4 MiB by default) are what the pool is
	// for. Below it the allocator serves as well: with 64 KiB, CompareEDS's 200 streams each
	// sent its own 200 KB response were 10-16% slower pooled (alternating runs).
	minPooledFrame = 1 << 20
)
