package filesource

import (
	"time"
)

// A reload reads only the files that may have changed: at 1,000,000 ServiceEntries in 1,000
// files, reading and hashing all of them to find the one that was edited was 400 MB and a
// third of a second for every edit. A file whose fingerprint (device, inode, size,
// modification and change times, taken before it was last read) is the same as then is not
// read again, with two exceptions:
//
//   - Racy timestamps (as git treats them): a file changed within racyWindow before it was
//     read could change again within the same timestamp tick (coarse on some filesystems)
//     without its times moving, so it is read again until its times are older than that.
//   - A watch error (events were lost): everything is read, as before.
//
// Every write moves the change time (ctime), which no user call sets, so tools that keep a
// file's modification time (cp -p, rsync -t) are still seen. Where the platform gives no
// inode and change time (fingerprintOf's ok false), every file is read at every reload.

// racyWindow is how recent a file's times must be to the read for the fingerprint to be
// trusted: coarse filesystems keep times to 1-2 seconds, clocks of network filesystems may
// drift from ours.
const racyWindow = 2 * time.Second

// fingerprint is what a file's stat says of its content's identity.
type fingerprint struct {
	dev, ino, size uint64
	mtime, ctime   int64 // Unix nanoseconds
}

// unchanged reports whether a file whose fingerprint was prev when it was read at readAt, and
// is cur now, can be taken as unchanged without reading it.
func unchanged(prev, cur fingerprint, readAt time.Time) bool {
	if prev != cur {
		return false
	}
	settled := readAt.Add(-racyWindow).UnixNano()
	return cur.mtime < settled && cur.ctime < settled
}
