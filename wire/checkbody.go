package wire

import (
	"math"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// CheckBody is a decoded POST /v1/check body (DecodeCheck): CheckRequest
// with its defaults filled in and its inline policies decoded.
type CheckBody struct {
	Tenant string
	// Hits is the request's cost: the body's, or 1 if it gives none.
	Hits     int64
	Endpoint string
	Policies []string
	Key      map[string]string
	// Checks are the inline checks: nil if the body has none, empty if
	// it gives an empty list.
	Checks []sluice.Check
}

// DecodeCheck decodes a POST /v1/check body, its text unchecked: the
// request and, for inline policies, its checks. The common shape, plain
// JSON of known fields, is read by hand (fastCheckBody); anything else,
// and every error, is ValidateText's check of the text then
// encoding/json's (slowCheckBody), so that both give the same result and
// every error names its field as it always has. A body the fast path
// reads passes ValidateText: its strings are plain and valid UTF-8, and
// no object of it has a member twice. It keeps nothing of body.
func DecodeCheck(body []byte) (CheckBody, error) {
	if in, ok := fastCheckBody(body); ok {
		return in, nil
	}
	if err := ValidateText(body); err != nil {
		return CheckBody{}, err
	}
	return slowCheckBody(body)
}

// fastCheckBody decodes body without reflection, as slowCheckBody would,
// or reports false for anything it is not sure to decode alike: escapes
// in strings, null, floats, numbers past 18 digits, member names in
// another case, a member given twice, penalties, data after the object,
// an invalid policy, and every syntax error. FuzzCheckBodyDecoders holds
// it to that.
func fastCheckBody(body []byte) (CheckBody, bool) {
	p := fastParser{b: body}
	in := CheckBody{Hits: 1}
	ok := p.fields(func(name []byte) (bit uint16, ok bool) {
		switch string(name) {
		case "tenant":
			bit = 1 << 0
			in.Tenant, ok = p.string()
		case "hits":
			bit = 1 << 1
			in.Hits, ok = p.int()
		case "checks":
			bit = 1 << 2
			in.Checks, ok = p.checks()
		case "endpoint":
			bit = 1 << 3
			in.Endpoint, ok = p.string()
		case "policies":
			bit = 1 << 4
			in.Policies, ok = p.strings()
		case "key":
			bit = 1 << 5
			in.Key, ok = p.stringMap()
		}
		return bit, ok
	})
	p.space()
	return in, ok && p.i == len(p.b)
}

// fastParser reads the plain JSON of fastCheckBody. Each method reads one
// value after optional white space, or reports false.
type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next consumes c, the next byte but for white space, if it is.
func (p *fastParser) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads an object, calling member for each member's value with its
// name (the parser just past the colon).
func (p *fastParser) object(member func(name []byte) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		name, ok := p.raw()
		if !ok || !p.next(':') || !member(name) {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// fields reads an object of known members, at most 16: field reads the
// value of the member name and returns its bit, or 0 and false for a name
// it does not know. A member given twice reports false, for the slow path
// to refuse.
func (p *fastParser) fields(field func(name []byte) (bit uint16, ok bool)) bool {
	var seen uint16
	return p.object(func(name []byte) bool {
		bit, ok := field(name)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
}

// array reads an array, calling elem for each element.
func (p *fastParser) array(elem func() bool) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.next(']') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// raw reads a plain string, one that encoding/json would take as it is
// (no escapes, no control characters, valid UTF-8), and returns its bytes.
func (p *fastParser) raw() ([]byte, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start, ascii := p.i+1, true
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := p.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			p.i = j + 1
			return s, true
		case c == '\\' || c < ' ':
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (p *fastParser) string() (string, bool) {
	s, ok := p.raw()
	return string(s), ok
}

// int reads an integer of at most 18 digits, which no int64 overflows.
func (p *fastParser) int() (int64, bool) {
	p.space()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var v int64
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		v = v*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	switch n := p.i - start; {
	case n == 0 || n > 18 || n > 1 && p.b[start] == '0':
		return 0, false
	case p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E'):
		return 0, false // a float: encoding/json's to refuse for an integer
	}
	if neg {
		v = -v
	}
	return v, true
}

func (p *fastParser) bool() (bool, bool) {
	p.space()
	switch {
	case len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		return true, true
	case len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		return false, true
	}
	return false, false
}

// duration reads a duration given as a string, as Duration does,
// and reports false for one that is not a duration (its error is
// encoding/json's path's to give) or that is a number of seconds.
func (p *fastParser) duration() (time.Duration, bool) {
	s, ok := p.raw()
	if !ok {
		return 0, false
	}
	if d, ok := simpleDuration(s); ok {
		return d, true
	}
	d, err := time.ParseDuration(string(s))
	return d, err == nil
}

// simpleDuration parses the durations of most policies, up to 9 digits and
// a unit ("60s", "1m", "500ms"), as time.ParseDuration does but without
// allocating; false for any other.
func simpleDuration(s []byte) (time.Duration, bool) {
	var n int64
	i := 0
	for i < len(s) && i < 9 && '0' <= s[i] && s[i] <= '9' {
		n = n*10 + int64(s[i]-'0')
		i++
	}
	if i == 0 {
		return 0, false
	}
	var unit time.Duration
	switch string(s[i:]) {
	case "ns":
		unit = time.Nanosecond
	case "us":
		unit = time.Microsecond
	case "ms":
		unit = time.Millisecond
	case "s":
		unit = time.Second
	case "m":
		unit = time.Minute
	case "h":
		unit = time.Hour
	default:
		return 0, false
	}
	if n > math.MaxInt64/int64(unit) {
		return 0, false // time.ParseDuration's overflow
	}
	return time.Duration(n) * unit, true
}

func (p *fastParser) strings() ([]string, bool) {
	out := []string{}
	ok := p.array(func() bool {
		s, ok := p.string()
		out = append(out, s)
		return ok
	})
	return out, ok
}

func (p *fastParser) stringMap() (map[string]string, bool) {
	out := map[string]string{}
	ok := p.object(func(name []byte) bool {
		v, ok := p.string()
		if _, dup := out[string(name)]; dup {
			return false // ValidateText's to refuse
		}
		out[string(name)] = v
		return ok
	})
	return out, ok
}

// checks reads inline checks and decodes their policies.
func (p *fastParser) checks() ([]sluice.Check, bool) {
	out := make([]sluice.Check, 0, 1)
	ok := p.array(func() bool {
		var key string
		var w Policy
		hasPolicy := false
		ok := p.fields(func(name []byte) (bit uint16, ok bool) {
			switch string(name) {
			case "key":
				bit = 1 << 0
				key, ok = p.string()
			case "policy":
				bit = 1 << 1
				hasPolicy = true
				ok = p.policy(&w)
			}
			return bit, ok
		})
		if !ok || !hasPolicy {
			return false
		}
		// The prefix names fields in errors, which are the slow path's
		// to give.
		pol, err := w.Decode("checks[].policy")
		if err != nil {
			return false
		}
		out = append(out, sluice.Check{Policy: pol, Key: key, Space: sluice.SpaceInline})
		return true
	})
	return out, ok
}

// policy reads an inline policy into w.
func (p *fastParser) policy(w *Policy) bool {
	return p.fields(func(name []byte) (bit uint16, ok bool) {
		switch string(name) {
		case "name":
			bit = 1 << 0
			w.Name, ok = p.string()
		case "algorithm":
			bit = 1 << 1
			w.Algorithm, ok = p.word()
		case "limit":
			bit = 1 << 2
			w.Limit, ok = p.int()
		case "window":
			bit = 1 << 3
			w.Window = new(Duration)
			w.Window.D, ok = p.duration()
		case "burst":
			bit = 1 << 4
			var b int64
			if b, ok = p.int(); ok {
				w.Burst = &b
			}
		case "leaseTTL":
			bit = 1 << 5
			w.LeaseTTL = new(Duration)
			w.LeaseTTL.D, ok = p.duration()
		case "buckets":
			bit = 1 << 6
			var n int64
			n, ok = p.int()
			w.Buckets = int(n)
		case "calendar":
			bit = 1 << 7
			w.Calendar, ok = p.word()
		case "shadow":
			bit = 1 << 8
			w.Shadow, ok = p.bool()
		case "failMode":
			bit = 1 << 9
			w.FailMode, ok = p.word()
		case "leased":
			bit = 1 << 10
			w.Leased, ok = p.bool()
		case "scope":
			bit = 1 << 11
			w.Scope, ok = p.word()
		}
		return bit, ok
	})
}

// word reads a string that is one of a policy's words (an algorithm, a
// calendar, a fail mode, a scope) without allocating it; any other string
// is allocated, for the decoder to refuse.
func (p *fastParser) word() (string, bool) {
	s, ok := p.raw()
	if !ok {
		return "", false
	}
	for _, w := range policyWords {
		if string(s) == w {
			return w, true
		}
	}
	return string(s), true
}

var policyWords = [...]string{
	"fixed_window", "token_bucket", "sliding_window", "sliding_log", "concurrency", "quota", "gcra",
	"", "month", "rolling", "open", "closed", "global", "regional",
}
