//go:build !race

package filesource

const poisonReadBuffers = false
