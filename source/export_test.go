package source

import "time"

// The in-process driver of the engine for tests of package source_test (the model of
// model_*_test.go, which shares no code with the engine and sees it only through exported
// API and this file).
//
// A stream normally runs its own loop: it waits for a request, a store change or a timer, and
// hands each to its machine. A driven stream has no loop: Serve hands it to the test and
// blocks until the test closes it, and the test delivers each event itself, synchronously,
// with its own clock: when a call returns, every response the event made has been passed to
// the adapter's Send. Everything else (the adapter, the machine, encoding, the frame cache,
// the metrics) is the engine's own.

// SyncStream is a stream driven by a test.
type SyncStream struct {
	s      *stream
	closed chan error
}

// DriveStreams makes every stream that e serves from now on a SyncStream: Serve hands it to
// opened (on the handler's goroutine) and then waits until the test closes it.
func DriveStreams(e *Engine, opened func(*SyncStream)) {
	e.drive = func(s *stream) error {
		ss := &SyncStream{s: s, closed: make(chan error, 1)}
		opened(ss)
		select {
		case err := <-ss.closed:
			return err
		case <-e.stop:
			return errStopping
		}
	}
}

// ID is the stream's ID, as the status and debug views name it.
func (ss *SyncStream) ID() uint64 { return ss.s.id }

// Receive reads the next request from the stream's adapter (the test has queued it, so the
// read does not block) and handles it at now. A nil request (a message that asks nothing) is
// handled as an event without one. The error is what would end the stream; after it the
// test must Close the stream with it.
func (ss *SyncStream) Receive(now time.Time) error {
	req, err := ss.s.adapter.Recv()
	if err != nil {
		return err
	}
	return ss.s.run(event{req: req}, now)
}

// Changed takes the store changes the stream watches at now, as its loop does when the
// store wakes it (or when paced changes fall due).
func (ss *SyncStream) Changed(now time.Time) error {
	ss.s.watch.Unmute()
	select {
	case <-ss.s.watch.C():
	default:
	}
	return ss.s.run(event{changed: ss.s.pc.take(ss.s, now, ss.s.watch.Changed())}, now)
}

// Tick is a timer event at now: heartbeats due, and paced changes due.
func (ss *SyncStream) Tick(now time.Time) error { return ss.Changed(now) }

// NextHeartbeat is when the stream's next heartbeat is due (zero: none scheduled).
func (ss *SyncStream) NextHeartbeat() time.Time {
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	return ss.s.m.nextHeartbeat()
}

// Close ends the stream: Serve returns err (nil: the client ended it).
func (ss *SyncStream) Close(err error) {
	select {
	case ss.closed <- err:
	default:
	}
}

// FrameHolds counts the holds on the frame memo's entries: streams between finding an entry
// and taking their reference to its frame, and parts encoded ahead and not yet sent.
func FrameHolds(e *Engine) (holds int) {
	e.frames.mu.Lock()
	defer e.frames.mu.Unlock()
	for el := e.frames.fifo.Front(); el != nil; el = el.Next() {
		holds += el.Value.(*memoEntry[frame]).users
	}
	return holds
}
