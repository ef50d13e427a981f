package filesource

import (
	"io/fs"
	"syscall"
)

func fingerprintOf(fi fs.FileInfo) (fingerprint, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fingerprint{}, false
	}
	return fingerprint{
		dev: uint64(st.Dev), ino: uint64(st.Ino), size: uint64(st.Size),
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}, true
}
