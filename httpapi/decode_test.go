package httpapi

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// TestRawCheckRequestMatchesWire: the slow path's shape of a check request
// has the wire's fields, no more, no fewer.
func TestRawCheckRequestMatchesWire(t *testing.T) {
	names := func(v any) []string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	if a, b := names(rawCheckRequest{}), names(wire.CheckRequest{}); !slices.Equal(a, b) {
		t.Fatalf("rawCheckRequest has %v, wire.CheckRequest %v", a, b)
	}
}

// TestInvalidTextNamesTheField: the first string that is not valid text is
// named by its path; valid text, escapes and pairs included, passes.
func TestInvalidTextNamesTheField(t *testing.T) {
	for body, field := range map[string]string{
		"{\"a\":\"ok\",\"b\":[1,\"x\",\"\xff\"]}":       "b[2]",
		"{\"a\":{\"b\xfe\":1}}":                         "a.b\ufffd",
		`{"a":"\ud83d"}`:                                "a",
		`{"a":"\ud83d\u0041"}`:                          "a",
		`{"a":"\ude00"}`:                                "a",
		`["x",{"k":["\\", "\ud800\ud800"]}]`:            "[1].k[1]",
		`{"a":"é \u00e9 \ud83d\ude00 \\u d800"}`:        "",
		`{"a":"\\ud800"}`:                               "", // an escaped backslash, then text
		`{"hits":1,"hits":5}`:                           "hits",
		`{"checks":[{"policy":{"limit":5,"limit":9}}]}`: "checks[0].policy.limit",
		`{"o":{"chat":{"limit":5},"chat":{}}}`:          "o.chat",
		`[{"a":1},{"a":1}]`:                             "",
	} {
		err := invalidText([]byte(body))
		switch {
		case field == "" && err != nil:
			t.Errorf("%s: %v, want valid", body, err)
		case field != "" && (err == nil || !strings.HasPrefix(err.Error(), field+" ")):
			t.Errorf("%s: %v, want an error naming %s", body, err, field)
		}
	}
}

// TestInlineChecksInTheirSpace: the inline policies a client sends count
// in their own key space, apart from configured policies' counters, even
// one configured later under the same name.
func TestInlineChecksInTheirSpace(t *testing.T) {
	_, checks, err := decodeCheckBody([]byte(`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`))
	if err != nil || len(checks) != 1 || checks[0].Space != sluice.SpaceInline {
		t.Fatalf("decoded %+v, %v: want one check in the inline space", checks, err)
	}
}

// FuzzPlainText: the one-pass check never clears a body that the walk,
// which names the field, refuses.
func FuzzPlainText(f *testing.F) {
	for _, seed := range []string{
		`{"a":"x","b":[1,"\xff"]}`, `{"a":1,"a":2}`, `{"a":{"b":1},"c":{"b":1}}`, `{"\u0061":1,"a":2}`,
		`{"a\n":1,"a\n":2}`, `["\ud800"]`, "{\"k\":\"\xc3\"}", `{"k":"é"}`, `{{{{`, `"\\"`,
		`{"checks":[{"key":"k","policy":{"name":"p","limit":1}}],"tenant":"t"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if plainText(body) && walkText(body) != nil {
			t.Fatalf("%q: cleared by plainText, refused by the walk: %v", body, walkText(body))
		}
	})
}
