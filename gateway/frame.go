package gateway

import (
	"encoding/json"
)

// parseFrame decodes a client's message as json.Unmarshal into a frame
// does, with the same result and the same error or lack of one, but in one
// pass over the data: a message's data is most of it (up to MaxMessage),
// and json.Unmarshal scans it twice with a state machine that costs tens
// of nanoseconds a byte. Every client's reader and the machine's cores are
// shared by all tenants; one tenant's large frames should cost them as
// little as they can. What the scan does not take on (escapes in the
// action or id, other or repeated fields, nesting past maxScanDepth) goes
// to json.Unmarshal.
func parseFrame(b []byte) (frame, error) {
	if f, ok := scanFrame(b); ok {
		return f, nil
	}
	var f frame
	err := json.Unmarshal(b, &f)
	return f, err
}

// maxScanDepth is the deepest data scanFrame checks itself; deeper data
// goes to json.Unmarshal, whose own limit (10,000) then applies.
const maxScanDepth = 256

// scanFrame decodes b if it is an object of the fields action, id (plain
// strings) and data (any valid JSON), each at most once; ok is false for
// anything else, valid or not, which json.Unmarshal then decides.
func scanFrame(b []byte) (f frame, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return f, false
	}
	var seen [3]bool
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return f, skipSpace(b, i+1) == len(b)
	}
	for {
		k, j, ok := plainString(b, i)
		if !ok {
			return f, false
		}
		key := b[i+1 : k]
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return f, false
		}
		i = skipSpace(b, i+1)
		switch string(key) {
		case "action", "id":
			field := 0
			if string(key) == "id" {
				field = 1
			}
			if seen[field] {
				return f, false
			}
			seen[field] = true
			k, j, ok := plainString(b, i)
			if !ok {
				return f, false
			}
			if v := b[i+1 : k]; field == 0 {
				f.Action = internAction(v)
			} else {
				f.ID = string(v)
			}
			i = j
		case "data":
			if seen[2] {
				return f, false
			}
			seen[2] = true
			j, ok := skipValue(b, i, 0)
			if !ok {
				return f, false
			}
			f.Data = append(json.RawMessage(nil), b[i:j]...)
			i = j
		default:
			return f, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return f, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return f, skipSpace(b, i+1) == len(b)
		default:
			return f, false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a string at b[i] of printable ASCII with no escape
// (json.Unmarshal would decode escapes, and replace bytes that are not
// UTF-8): it returns the index of its closing quote and the one past it.
func plainString(b []byte, i int) (int, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j, j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// internAction returns the action v names, without a copy for the two
// actions there are.
func internAction(v []byte) string {
	switch string(v) {
	case "pooled":
		return "pooled"
	case "silo":
		return "silo"
	}
	return string(v)
}

// skipValue returns the index past the JSON value at b[i], and whether it
// is valid (false past maxScanDepth, valid or not).
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		if depth >= maxScanDepth {
			return 0, false
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == end {
			return i + 1, true
		}
		for {
			if c == '{' {
				j, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = skipSpace(b, j)
				if i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipSpace(b, i+1)
			}
			j, ok := skipValue(b, i, depth+1)
			if !ok {
				return 0, false
			}
			i = skipSpace(b, j)
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case end:
				return i + 1, true
			default:
				return 0, false
			}
		}
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
			return i + len(lit), true
		}
	}
	return 0, false
}

// skipString returns the index past the JSON string at b[i]: its escapes
// valid, and no control byte. Bytes are not checked as UTF-8, as
// encoding/json does not (a text message was checked whole).
func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		switch c {
		case '"':
			return j + 1, true
		case '\\':
			j++
			if j >= len(b) {
				return 0, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-j <= 4 {
					return 0, false
				}
				for _, h := range b[j+1 : j+5] {
					if !isHex(h) {
						return 0, false
					}
				}
				j += 4
			default:
				return 0, false
			}
		default:
			return 0, false // a control byte
		}
	}
	return 0, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// skipNumber returns the index past the JSON number at b[i].
func skipNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
