//go:build !race

package source

const poisonFreedFrames = false
