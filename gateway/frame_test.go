package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// frameCases are messages a client may send, valid or not, of each shape
// the scan takes on or hands to json.Unmarshal.
var frameCases = []string{
	`{"action":"pooled","data":"hello"}`,
	` { "action" : "silo" , "data" : {"a": [1, -2.5e3, true, false, null, "x\"y\\u00e9"]} , "id" : "m-1" } `,
	`{"data":null,"action":"pooled"}`,
	`{"action":"pooled"}`,
	`{}`,
	`{"action":"pooled","data":[]}`,
	`{"action":"pooled","data":{}}`,
	`{"action":"pooled","data":0}`,
	`{"action":"pooled","data":-0.0E+1}`,
	`{"action":"pooled","data":01}`,
	`{"action":"pooled","data":1.}`,
	`{"action":"pooled","data":1e}`,
	`{"action":"pooled","data":-}`,
	`{"action":"pooled","data":tru}`,
	`{"action":"pooled","data":"a\qb"}`,
	`{"action":"pooled","data":"\u12G4"}`,
	"{\"action\":\"pooled\",\"data\":\"a\tb\"}",
	`{"action":"pooled","data":"unterminated}`,
	`{"action":"pooled","data":{"a":1,}}`,
	`{"action":"pooled","data":[1 2]}`,
	`{"action":"pooled","data":{"a" 1}}`,
	`{"action":"pooled","data":"x"} trailing`,
	`{"action":"pooled","data":"x"}{}`,
	`{"action":"pooled","action":"silo"}`,
	`{"action":"pooled","data":1,"data":2}`,
	`{"action":"pooled","other":1}`,
	`{"Action":"pooled"}`,
	`{"action":"p\u006foled"}`,
	`{"action":1}`,
	`{"id":null,"action":"pooled"}`,
	`[1]`,
	`"x"`,
	``,
	`{`,
	`{"action":"pooled",}`,
	`{"action":"pooled","data":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
	`{"action":"pooled","data":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
	"{\"action\":\"pooled\",\"data\":\"\xff\xfe\"}",
}

// parseFrame answers what json.Unmarshal answers: the same frame, or an
// error where it errs.
func TestParseFrameIsUnmarshal(t *testing.T) {
	for _, c := range frameCases {
		sameAsUnmarshal(t, []byte(c))
	}
}

// FuzzParseFrame holds parseFrame to json.Unmarshal on any input.
func FuzzParseFrame(f *testing.F) {
	for _, c := range frameCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsUnmarshal(t, b) })
}

func sameAsUnmarshal(t *testing.T, b []byte) {
	t.Helper()
	var want frame
	wantErr := json.Unmarshal(b, &want)
	got, err := parseFrame(b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%.200q: error %v, json.Unmarshal's %v", b, err, wantErr)
	}
	if err != nil {
		return
	}
	if got.Action != want.Action || got.ID != want.ID || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("%.200q: %+v, json.Unmarshal's %+v", b, got, want)
	}
}

// The scan takes the common shapes itself, and copies the data out of the
// read buffer.
func TestScanFrameTakesTheCommonShapes(t *testing.T) {
	for _, c := range []string{
		`{"action":"pooled","data":"` + strings.Repeat("x", 32<<10) + `","id":"m"}`,
		`{"action":"silo","data":{"seq":1,"at":1764230400000000000,"text":"h\u00e9llo\n"}}`,
	} {
		b := []byte(c)
		f, ok := scanFrame(b)
		if !ok {
			t.Fatalf("%.80q went to json.Unmarshal", c)
		}
		b[len(b)-3] = '!'
		if bytes.ContainsRune(f.Data, '!') {
			t.Errorf("the data shares the read buffer")
		}
	}
}

// BenchmarkParseFrame is a 32 KiB frame's decoding: the scan, and
// json.Unmarshal as it was.
func BenchmarkParseFrame(b *testing.B) {
	msg := []byte(`{"action":"pooled","data":"` + strings.Repeat("x", 32<<10) + `","id":"m"}`)
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			if _, err := parseFrame(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			var f frame
			if err := json.Unmarshal(msg, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
