package wire

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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
	if a, b := names(rawCheckRequest{}), names(CheckRequest{}); !slices.Equal(a, b) {
		t.Fatalf("rawCheckRequest has %v, CheckRequest %v", a, b)
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
		err := ValidateText([]byte(body))
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
	in, err := DecodeCheck([]byte(`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`))
	if err != nil || len(in.Checks) != 1 || in.Checks[0].Space != sluice.SpaceInline {
		t.Fatalf("decoded %+v, %v: want one check in the inline space", in.Checks, err)
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

// checkBodies are bodies of POST /v1/check, good and bad, for the two
// decoders to agree on.
var checkBodies = []string{
	`{"tenant":"acme","checks":[{"key":"user-1","policy":{"name":"chat","algorithm":"fixed_window","limit":3,"window":"60s"}}]}`,
	`{"tenant":"bench","checks":[{"key":"user-1","policy":{"name":"bench","algorithm":"fixed_window","limit":1000000,"window":"1m"}}]}`,
	` { "tenant" : "t" , "hits" : 0 , "checks" : [ { "policy" : { "name" : "p" , "algorithm" : "token_bucket" , "limit" : 5 , "window" : "1s" , "burst" : 9 } , "key" : "k" } ] } ` + "\n",
	`{"checks":[{"key":"a","policy":{"name":"p","algorithm":"gcra","limit":1,"window":"1s","shadow":true,"failMode":"closed","scope":"regional","leased":false}},{"key":"b","policy":{"name":"q","algorithm":"concurrency","limit":2,"leaseTTL":"30s"}}]}`,
	`{"checks":[{"key":"a","policy":{"name":"p","algorithm":"quota","limit":10,"window":"24h","buckets":24,"calendar":"rolling"}}]}`,
	`{"checks":[{"key":"a","policy":{"name":"p","algorithm":"quota","limit":10,"calendar":"month"}}]}`,
	`{"checks":[]}`, `{}`, `{"hits":-3}`, `{"hits":123456789012345678}`, `{"hits":1234567890123456789}`,
	`{"hits":99999999999999999999}`, `{"hits":1.0}`, `{"hits":1e3}`, `{"hits":01}`, `{"hits":-}`, `{"hits":null}`,
	`{"tenant":"acme","endpoint":"chat","key":{"user":"u1","ip":"10.0.0.1"}}`,
	`{"tenant":"acme","policies":["a","b"],"key":{}}`, `{"policies":[]}`, `{"policies":null}`, `{"key":null}`,
	`{"tenant":"é","checks":[{"key":"ключ","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`,
	`{"tenant":"a\"b"}`, `{"tenant":"\u0041"}`, `{"Tenant":"a"}`, `{"tenant":"a","tenant":"b"}`,
	`{"key":{"a":"1"},"key":{"b":"2"}}`, `{"key":{"a":"1","a":"2"}}`, `{"tenant":"\ud800"}`, "{\"key\":{\"\xfe\":\"1\"}}",
	`{"tenant":"a"}}`, `{"tenant":"a"} x`, `{"tenant":"a"}{}`, `{"tenant":"a"`, `{"tenant":1}`, `{"tenant":"a",}`,
	`{"nope":1}`, `[]`, `""`, ``, `null`, "{\"tenant\":\"\xff\"}", "{\"tenant\":\"a\tb\"}",
	`{"checks":[{"key":"k"}]}`, `{"checks":[{"key":"k","policy":null}]}`, `{"checks":[{"key":"k","policy":{}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"nope","limit":1,"window":"1m"}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1x"}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":60}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":1e99}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"token_bucket","limit":1,"window":"1s","burst":0}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m","penalty":{"after":3,"base":"1m"}}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m","calendar":"week"}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m","failMode":"maybe"}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m","scope":"local"}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m","shadow":"yes"}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m","extra":1}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"limit":2,"window":"1m"}}]}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m"}}],"endpoint":"chat"}`,
	`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m"}},]}`,
	`{"checks":{"key":"k"}}`, `{"checks":[1]}`, `{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m"}}`,
}

// TestCheckBodyFastPath: the bodies of every day take the fast path.
func TestCheckBodyFastPath(t *testing.T) {
	for _, body := range checkBodies[:7] {
		if _, ok := fastCheckBody([]byte(body)); !ok {
			t.Errorf("%s: not decoded by the fast path", body)
		}
	}
}

// TestCheckBodyDecodersAgree: what the fast path decodes, encoding/json
// decodes alike; what it refuses, the decoder answers as ValidateText and
// encoding/json did.
func TestCheckBodyDecodersAgree(t *testing.T) {
	for _, body := range checkBodies {
		checkDecodersAgree(t, []byte(body))
	}
}

// FuzzCheckBodyDecoders is TestCheckBodyDecodersAgree on any body.
func FuzzCheckBodyDecoders(f *testing.F) {
	for _, body := range checkBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(checkDecodersAgree)
}

func checkDecodersAgree(t *testing.T, body []byte) {
	t.Helper()
	slow, slowErr := slowCheckBody(body)
	if err := ValidateText(body); err != nil {
		slow, slowErr = CheckBody{}, err
	}
	got, err := DecodeCheck(body)
	if fmt.Sprint(err) != fmt.Sprint(slowErr) || !reflect.DeepEqual(got, slow) {
		t.Fatalf("%q: decoded\n%#v, %v\nencoding/json:\n%#v, %v", body, got, err, slow, slowErr)
	}
	if fast, ok := fastCheckBody(body); ok && (slowErr != nil || !reflect.DeepEqual(fast, slow)) {
		t.Fatalf("%q: fast path\n%#v\nencoding/json:\n%#v, %v", body, fast, slow, slowErr)
	}
}

// FuzzSimpleDuration: the fast path's durations are time.ParseDuration's.
func FuzzSimpleDuration(f *testing.F) {
	for _, s := range []string{"1m", "60s", "500ms", "24h", "00s", "0", "999999999h", "1.5s", "1h30m", "5us", "5µs", "-1s", "+1s", "1x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := simpleDuration([]byte(s))
		if want, err := time.ParseDuration(s); ok && (err != nil || got != want) {
			t.Fatalf("%q: %v, time.ParseDuration: %v, %v", s, got, want, err)
		}
	})
}

// TestNoFieldBurns: no field of a POST /v1/check body, in any place or
// case, sets sluice.Check.Burn, which only code sets: each such body is
// refused, or decodes to checks that do not burn.
func TestNoFieldBurns(t *testing.T) {
	const pol = `{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m"}`
	for _, body := range []string{
		`{"checks":[{"key":"k","policy":` + pol + `,"burn":true}]}`,
		`{"checks":[{"key":"k","policy":` + pol + `,"Burn":true}]}`,
		`{"checks":[{"key":"k","policy":` + pol + `,"BURN":1}]}`,
		`{"checks":[{"key":"k","policy":{"name":"p","algorithm":"fixed_window","limit":1,"window":"1m","burn":true}}]}`,
		`{"burn":true,"checks":[{"key":"k","policy":` + pol + `}]}`,
		`{"Burn":true,"checks":[{"key":"k","policy":` + pol + `}]}`,
	} {
		in, err := DecodeCheck([]byte(body))
		if err == nil {
			t.Errorf("%s: accepted", body)
		}
		for _, c := range in.Checks {
			if c.Burn {
				t.Errorf("%s: a check burns", body)
			}
		}
	}
}

// TestBurnNotSent: a request with a burn check is refused before it is
// sent (client.Client), not sent as a check that would count otherwise.
func TestBurnNotSent(t *testing.T) {
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	_, err := FromRequest(sluice.Request{Tenant: "t", Hits: 1, Checks: []sluice.Check{{Policy: p}, {Policy: p, Key: "k", Burn: true}}})
	if sluice.KindOf(err) != sluice.KindInvalid || !strings.Contains(err.Error(), "checks[1].burn") {
		t.Fatalf("error %v, want invalid naming checks[1].burn", err)
	}
}
