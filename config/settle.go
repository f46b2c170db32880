package config

import "crypto/sha256"

// Settled tells a poller when a file's content, read by each poll, has
// changed and settled: a change is loaded once two polls in a row read the
// same new content, so that a file being written in place is not loaded
// half written. A change is found by content, never by size and
// modification time, which a file replaced within one tick of the clock may
// keep. The zero Settled has loaded nothing.
type Settled struct {
	// sum is the hash of the content last loaded, in force or rejected;
	// seen, of a change the last poll read, not yet loaded.
	sum     [sha256.Size]byte
	seen    [sha256.Size]byte
	hasSeen bool
}

// Loaded records that the content of hash sum was loaded (in force or
// rejected): it is not loaded again until it changes.
func (s *Settled) Loaded(sum [sha256.Size]byte) { s.sum, s.hasSeen = sum, false }

// Poll is told the hash of the content a poll read, and reports whether to
// load it now.
func (s *Settled) Poll(sum [sha256.Size]byte) bool {
	switch {
	case sum == s.sum:
		s.hasSeen = false
	case !s.hasSeen || sum != s.seen:
		s.seen, s.hasSeen = sum, true // look again next poll: it may be half written
	default:
		return true
	}
	return false
}
