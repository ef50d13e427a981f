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

// readBuffers recycles the buffers files are read into. A file's text is garbage once its
// objects are encoded (storedOf copies what it keeps), and at a million ServiceEntries a
// load read 430 MB into new buffers, a sixth of what it allocated, each collected in turn.
var readBuffers sync.Pool // of *[]byte

// putReadBuffer gives back a buffer nothing views any more.
func putReadBuffer(b *[]byte, data []byte) {
	if poisonReadBuffers {
		for i := range data {
			data[i] = 0xff
		}
	}
	*b = data[:0]
	readBuffers.Put(b)
}

func getReadBuffer() *[]byte {
	if b, _ := readBuffers.Get().(*[]byte); b != nil {
		return b
	}
	return new([]byte)
}
