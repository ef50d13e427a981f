//go:build !linux

package filesource

import "io/fs"

// fingerprintOf: no inode and change time here; every file is read at every reload.
func fingerprintOf(fs.FileInfo) (fingerprint, bool) { return fingerprint{}, false }
