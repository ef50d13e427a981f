//go:build race

package filesource

// poisonReadBuffers: under the race detector, which every test run uses, a read scratch given
// back is overwritten, so that anything that still views a file's text or its documents'
// encodings after its objects were encoded reads garbage (and is caught as wrong config), not
// the old bytes by luck.
const poisonReadBuffers = true
