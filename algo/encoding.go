package algo

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
)

// stateVersion is the first byte of an encoded State, so that the format
// can change without misreading what an older version wrote.
const stateVersion = 1

// AppendBinary appends the encoding of s to b: a version byte, the
// algorithm, then varints. It implements encoding.BinaryAppender.
func (s *State) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, stateVersion, byte(s.Algorithm))
	for _, v := range [...]int64{s.Expires, s.Start, s.Count, s.Prev, s.TAT} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Entries)))
	for _, e := range s.Entries {
		b = binary.AppendVarint(b, e.At)
		b = binary.AppendVarint(b, e.N)
		b = binary.AppendUvarint(b, e.ID)
	}
	return b, nil
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (s *State) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

var errCorrupt = errors.New("algo: corrupt state encoding")

// UnmarshalBinary decodes what AppendBinary encoded. It refuses unknown
// versions, unknown algorithms, truncated and trailing data.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) < 2 {
		return errCorrupt
	}
	if b[0] != stateVersion {
		return fmt.Errorf("algo: state encoding version %d, this build reads %d", b[0], stateVersion)
	}
	alg := sluice.Algorithm(b[1])
	if alg != 0 && !alg.Valid() {
		return fmt.Errorf("algo: unknown algorithm %d in state", b[1])
	}
	b = b[2:]
	next := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	var st State
	st.Algorithm = alg
	st.Expires, st.Start, st.Count, st.Prev, st.TAT = next(), next(), next(), next(), next()
	if b == nil {
		return errCorrupt
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) { // every entry takes at least 3 bytes
		return errCorrupt
	}
	b = b[k:]
	if n > 0 {
		st.Entries = make([]Entry, n)
	}
	for i := range st.Entries {
		st.Entries[i].At = next()
		st.Entries[i].N = next()
		if b == nil {
			return errCorrupt
		}
		id, k := binary.Uvarint(b)
		if k <= 0 {
			return errCorrupt
		}
		st.Entries[i].ID = id
		b = b[k:]
	}
	if len(b) != 0 {
		return errCorrupt
	}
	*s = st
	return nil
}
