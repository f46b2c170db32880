package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// ValidateText returns an error naming the first string of a JSON body that
// is not valid text, or the first member name repeated in its object
// (encoding/json would silently keep the last: {"limit":5,"limit":1e9}),
// or nil. Syntax errors are left to the decoder. Most bodies are plain:
// one pass over the bytes (plainText) clears them without allocating, and
// only the others are walked token by token to name the field.
func ValidateText(body []byte) error {
	if plainText(body) {
		return nil
	}
	return walkText(body)
}

// walkText is ValidateText token by token, keeping the path to name.
func walkText(body []byte) error {
	type step struct {
		array   bool
		key     string   // an object's current member
		keys    []string // an object's members so far
		index   int      // an array's current element
		wantKey bool     // an object's next token is a member name
	}
	var stack []step
	path := func() string {
		var b strings.Builder
		for _, s := range stack {
			if s.array {
				fmt.Fprintf(&b, "[%d]", s.index)
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		}
		if b.Len() == 0 {
			return "body"
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		raw := body[start:dec.InputOffset()]
		var top *step
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && !top.array && top.wantKey {
			top.key, top.wantKey = s, false
			if !validString(raw) {
				return sluice.Invalid(path(), "is a member name that is not valid UTF-8")
			}
			if slices.Contains(top.keys, s) {
				return sluice.Invalid(path(), "is given twice")
			}
			top.keys = append(top.keys, s)
			continue
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && !stack[len(stack)-1].array {
				stack[len(stack)-1].wantKey = true
			}
			continue
		}
		if top != nil && top.array {
			top.index++
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, step{wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, step{array: true, index: -1})
			continue
		}
		if _, ok := tok.(string); ok && !validString(raw) {
			return sluice.Invalid(path(), "is not valid UTF-8")
		}
		if top != nil && !top.array {
			top.wantKey = true
		}
	}
}

// plainText reports whether body certainly holds only valid UTF-8 strings
// and no member name twice in an object. False means "look closer": a
// string with a \u escape, a member name with any escape, nesting deeper
// than it keeps track of, or a real problem.
func plainText(b []byte) bool {
	const maxDepth = 32
	type frame struct {
		object  bool
		keys    int // where this object's member names start in names
		wantKey bool
	}
	var stack [maxDepth]frame
	var nameBuf [32][]byte
	names := nameBuf[:0]
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '{', '[':
			if depth == maxDepth {
				return false
			}
			stack[depth] = frame{object: c == '{', keys: len(names), wantKey: c == '{'}
			depth++
		case '}', ']':
			if depth == 0 {
				return false
			}
			depth--
			names = names[:stack[depth].keys]
		case ',':
			if depth > 0 && stack[depth-1].object {
				stack[depth-1].wantKey = true
			}
		case '"':
			start, escaped := i+1, false
			for i++; ; i++ {
				if i >= len(b) {
					return false
				}
				if b[i] == '"' {
					break
				}
				if b[i] == '\\' {
					if i+1 < len(b) && b[i+1] == 'u' {
						return false // an escaped code point: look closer
					}
					escaped = true
					i++
					continue
				}
				if b[i] >= utf8.RuneSelf {
					r, size := utf8.DecodeRune(b[i:])
					if r == utf8.RuneError && size == 1 {
						return false
					}
					i += size - 1
				}
			}
			if depth > 0 && stack[depth-1].object && stack[depth-1].wantKey {
				name := b[start:i]
				if escaped {
					return false
				}
				for _, n := range names[stack[depth-1].keys:] {
					if bytes.Equal(n, name) {
						return false
					}
				}
				names = append(names, name)
				stack[depth-1].wantKey = false
			}
		}
	}
	return true
}

// validString reports whether a JSON token's text, with the separators
// before it, is valid UTF-8 with every escaped surrogate in a pair.
func validString(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	high := false // the last escape was a high surrogate, awaiting its low
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			if high {
				return false
			}
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw) {
			if high {
				return false
			}
			i++ // an escape of one character
			continue
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			return false
		}
		switch {
		case v >= 0xD800 && v < 0xDC00:
			if high {
				return false
			}
			high = true
		case v >= 0xDC00 && v < 0xE000:
			if !high {
				return false
			}
			high = false
		default:
			if high {
				return false
			}
		}
		i += 5
	}
	return !high
}

// rawCheckRequest is CheckRequest with its checks kept raw, for the
// slow path, which decodes them one by one so that an error names the
// check's index. TestRawCheckRequestMatchesWire keeps their fields alike.
type rawCheckRequest struct {
	Tenant   string            `json:"tenant"`
	Hits     *int64            `json:"hits"`
	Checks   []json.RawMessage `json:"checks"`
	Endpoint string            `json:"endpoint"`
	Policies []string          `json:"policies"`
	Key      map[string]string `json:"key"`
}

// slowCheckBody is DecodeCheck by encoding/json, for any body. Most
// bodies are valid and decode in one pass; only when that fails is the
// body decoded again, piece by piece, for an error naming the field at
// fault.
func slowCheckBody(body []byte) (CheckBody, error) {
	var in CheckRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || dec.More() {
		return CheckBody{}, slowError(body)
	}
	checks, err := decodeChecks(in.Checks)
	if err != nil {
		return CheckBody{}, err
	}
	out := CheckBody{Tenant: in.Tenant, Hits: 1, Endpoint: in.Endpoint, Policies: in.Policies, Key: in.Key, Checks: checks}
	if in.Hits != nil {
		out.Hits = *in.Hits
	}
	return out, nil
}

// slowError decodes body, piece by piece, for an error naming the field
// at fault.
func slowError(body []byte) error {
	var in rawCheckRequest
	if err := DecodeStrict(body, &in, ""); err != nil {
		return err
	}
	for i, raw := range in.Checks {
		var c Check
		if err := DecodeStrict(raw, &c, fmt.Sprintf("checks[%d]", i)); err != nil {
			return err
		}
	}
	return sluice.Invalid("body", "is not valid")
}

// decodeChecks turns inline checks into a request's checks.
func decodeChecks(cs []Check) ([]sluice.Check, error) {
	if cs == nil {
		return nil, nil
	}
	checks := make([]sluice.Check, len(cs))
	for i, c := range cs {
		prefix := fmt.Sprintf("checks[%d]", i)
		if c.Policy == nil {
			return nil, sluice.Invalid(prefix+".policy", "is missing")
		}
		p, err := c.Policy.Decode(prefix + ".policy")
		if err != nil {
			return nil, err
		}
		checks[i] = sluice.Check{Policy: p, Key: c.Key, Space: sluice.SpaceInline}
	}
	return checks, nil
}

// DecodePolicy decodes an inline policy, naming fields under prefix.
func DecodePolicy(raw json.RawMessage, prefix string) (sluice.Policy, error) {
	var w Policy
	if err := DecodeStrict(raw, &w, prefix); err != nil {
		return sluice.Policy{}, err
	}
	return w.Decode(prefix)
}

// DecodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data, and names the offending field under prefix.
func DecodeStrict(data []byte, v any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() {
			return sluice.Invalid(join(prefix, ""), "has data after the JSON value")
		}
		return nil
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return sluice.Invalid(join(prefix, ""), "is empty: want a JSON object")
	case errors.As(err, &syntax):
		return sluice.Invalid(join(prefix, ""), "is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return sluice.Invalid(join(prefix, ""), "must be a JSON %s, got %s", want(v), typ.Value)
		}
		return sluice.Invalid(join(prefix, typ.Field), "must be %s, got %s", typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		field := join(prefix, name)
		if path, ok := unknownField(data, reflect.TypeOf(v), prefix); ok && strings.HasSuffix(path, name) {
			field = path
		}
		return sluice.Invalid(field, "is not a known field")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return sluice.Invalid(join(prefix, ""), "is truncated JSON")
	}
	return sluice.Invalid(join(prefix, ""), "is not valid: %v", err)
}

// unknownField returns the path, under prefix, of the first member of
// data that typ has no field for, in the order encoding/json meets them,
// and true; or false if it finds none. encoding/json names an unknown
// member alone ("windw"), not where it is ("checks[1].policy.windw").
// Members are matched to fields as encoding/json matches them: by the
// name in the field's tag, or its Go name, exactly or else in any case.
// A value of a type that decodes itself (json.Unmarshaler: durations, raw
// values) is not looked into, nor one whose JSON kind its type does not
// take (encoding/json's type error, not an unknown field).
func unknownField(data []byte, typ reflect.Type, prefix string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var walk func(t reflect.Type, path string) (string, bool, error)
	walk = func(t reflect.Type, path string) (string, bool, error) {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		tok, err := dec.Token()
		if err != nil {
			return "", false, err
		}
		d, isDelim := tok.(json.Delim)
		if !isDelim {
			return "", false, nil
		}
		if t == nil || reflect.PointerTo(t).Implements(unmarshaler) || t.Kind() == reflect.Interface {
			t = nil // skip the value
		}
		i := 0
		for dec.More() {
			var elem reflect.Type
			var at string
			switch {
			case d == '{':
				tok, err := dec.Token()
				if err != nil {
					return "", false, err
				}
				name, _ := tok.(string)
				at = join(path, name)
				switch {
				case t == nil:
				case t.Kind() == reflect.Struct:
					f, ok := jsonField(t, name)
					if !ok {
						return at, true, nil
					}
					elem = f
				case t.Kind() == reflect.Map:
					elem = t.Elem()
				}
			default:
				at = fmt.Sprintf("%s[%d]", path, i)
				if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
					elem = t.Elem()
				}
				i++
			}
			if at, found, err := walk(elem, at); found || err != nil {
				return at, found, err
			}
		}
		_, err = dec.Token() // the closing delimiter
		return "", false, err
	}
	path, found, _ := walk(typ, prefix)
	return path, found
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// jsonField returns the type of the field of struct t that encoding/json
// decodes the member name into, and true; or false if there is none.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	var folded reflect.Type
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			continue // promoted fields are visited themselves
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f.Type, true
		}
		if folded == nil && strings.EqualFold(tag, name) {
			folded = f.Type
		}
	}
	return folded, folded != nil
}

// want names the JSON kind v, a pointer, is decoded from: an object for a
// struct (every body the API takes), a value for anything else.
func want(v any) string {
	if t := reflect.TypeOf(v); t != nil && t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		return "object"
	}
	return "value"
}

// join builds a field path; the empty path is the body itself.
func join(prefix, field string) string {
	switch {
	case prefix == "" && field == "":
		return "body"
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}
