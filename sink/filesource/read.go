package filesource

import (
	"io"
	"math"
	"os"
	"sync"
)

// readFile reads a file's content into buf's array when it has room (else into a new one);
// a variable, so that tests can count the reads.
var readFile = readFileInto

func readFileInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := 0
	if fi, err := f.Stat(); err == nil && fi.Size() < math.MaxInt32 {
		size = int(fi.Size())
	}
	// Room for what Stat says and one byte more, so that the read that finds the end needs
	// no growth (as os.ReadFile does).
	if cap(buf) < size+1 {
		buf = make([]byte, 0, size+512)
	}
	buf = buf[:0]
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // the file grew since Stat: more room
		}
	}
}

// readScratch is what a file's read and decode use and drop once its objects are encoded
// (storedOf copies what it keeps): the file's text, and the first block of its documents'
// encodings (decodeOwned). At a million ServiceEntries a load allocated 430 MB of text
// and 260 MB of blocks, a sixth of all it allocated, each collected in its turn and each page
// faulted in fresh; the scratch goes back to a sync.Pool instead.
type readScratch struct {
	text, values []byte
}

var readScratches sync.Pool // of *readScratch

func getReadScratch() *readScratch {
	if s, _ := readScratches.Get().(*readScratch); s != nil {
		return s
	}
	return &readScratch{values: make([]byte, 0, valueChunk)}
}

// putReadScratch gives back a scratch nothing views any more, text being what was read into
// it (perhaps a new array, grown for a larger file) and values the block decode was given.
func putReadScratch(s *readScratch, text []byte) {
	if poisonReadBuffers {
		poisonBytes(text[:cap(text)])
		poisonBytes(s.values[:cap(s.values)])
	}
	s.text = text[:0]
	readScratches.Put(s)
}

func poisonBytes(b []byte) {
	for i := range b {
		b[i] = 0xff
	}
}
