package wire

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// encodingJSON is what WriteJSON writes of v.
func encodingJSON(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestAppendJSONIsEncodingJSON: a decision's body is encoding/json's, byte
// for byte, for every field and for strings that need escapes.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	reset := time.Date(2026, 11, 21, 10, 1, 0, 1, time.UTC)
	for _, res := range []sluice.Result{
		{Allowed: true, Decision: sluice.Decision{Policy: "bench", Allowed: true, Limit: 1000000, Remaining: 999999, ResetAt: reset}, Decisions: []sluice.Decision{{Policy: "bench", Allowed: true, Limit: 1000000, Remaining: 999999, ResetAt: reset}}},
		{Decision: sluice.Decision{Policy: "a", Limit: 3, ResetAt: reset, RetryAfter: 1500 * time.Millisecond}, Decisions: []sluice.Decision{{Policy: "a", Limit: 3, ResetAt: reset, RetryAfter: 1500 * time.Millisecond}, {Policy: "b", Allowed: true, Limit: -1, Remaining: -5}, {Policy: "a"}}},
		{Allowed: true, Decision: sluice.Decision{Policy: "c", Allowed: true, Lease: sluice.Lease{ID: 1<<64 - 1, ExpiresAt: reset}, Shadowed: true, FailedOpen: true, FailedClosed: true}, Decisions: []sluice.Decision{{Policy: "c", Lease: sluice.Lease{ID: 7, ExpiresAt: reset}, Shadowed: true, FailedOpen: true, FailedClosed: true}}},
		{Decision: sluice.Decision{Policy: `<"é\u2028&\\>` + "\x00\n\xff"}, Decisions: []sluice.Decision{{Policy: "\t\x7f"}}},
		{Allowed: true},
		{Allowed: true, Decisions: []sluice.Decision{}},
	} {
		out := FromResult(res)
		want := encodingJSON(t, out)
		if got := append(out.AppendJSON(nil), '\n'); !bytes.Equal(got, want) {
			t.Errorf("AppendJSON:\n%s\nencoding/json:\n%s", got, want)
		}
		if got := append(AppendResult(nil, res), '\n'); !bytes.Equal(got, want) {
			t.Errorf("AppendResult:\n%s\nencoding/json:\n%s", got, want)
		}
		w := httptest.NewRecorder()
		WriteResult(w, 429, res)
		r := httptest.NewRecorder()
		WriteJSON(r, 429, out)
		if w.Code != r.Code || !bytes.Equal(w.Body.Bytes(), r.Body.Bytes()) || w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "no-store" || len(w.Header()) != len(r.Header()) {
			t.Errorf("WriteResult: %d %v %s, WriteJSON: %d %v %s", w.Code, w.Header(), w.Body, r.Code, r.Header(), r.Body)
		}
	}
	out := CheckResponse{Allowed: true, Decision: Decision{Lease: &Lease{Token: "tok", ID: "1"}}, Violated: []string{"a", "b>"}, Error: "e", Message: "m"}
	if got, want := append(out.AppendJSON(nil), '\n'), encodingJSON(t, out); !bytes.Equal(got, want) {
		t.Errorf("AppendJSON:\n%s\nencoding/json:\n%s", got, want)
	}
}

// FuzzAppendJSON is TestAppendJSONIsEncodingJSON on any strings and
// numbers.
func FuzzAppendJSON(f *testing.F) {
	f.Add("bench", "tok", "1", "msg", int64(5), int64(-3), uint8(0))
	f.Add("<a&b>", "", "\xff", "\u2029", int64(0), int64(1<<62), uint8(255))
	f.Fuzz(func(t *testing.T, policy, token, id, msg string, n, m int64, flags uint8) {
		d := Decision{Policy: policy, Allowed: flags&1 != 0, Limit: n, Remaining: m, ResetAt: n ^ m, RetryAfter: m, RetryAfterMs: n,
			Shadowed: flags&2 != 0, FailedOpen: flags&4 != 0, FailedClosed: flags&8 != 0}
		if flags&16 != 0 {
			d.Lease = &Lease{Token: token, ID: id, ExpiresAtMs: m}
		}
		out := CheckResponse{Allowed: flags&32 != 0, Decision: d, Decisions: []Decision{d, {Policy: msg}}}
		if flags&64 != 0 {
			out.Error, out.Message, out.Violated = msg, policy, []string{policy, token}
		}
		if flags&128 != 0 {
			out.Decisions = nil
		}
		if got, want := append(out.AppendJSON(nil), '\n'), encodingJSON(t, out); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON:\n%s\nencoding/json:\n%s", got, want)
		}
		dec := sluice.Decision{Policy: policy, Allowed: flags&1 != 0, Limit: n, Remaining: m, ResetAt: time.Unix(0, n), RetryAfter: time.Duration(m),
			Shadowed: flags&2 != 0, FailedOpen: flags&4 != 0, FailedClosed: flags&8 != 0}
		if flags&16 != 0 {
			dec.Lease = sluice.Lease{ID: uint64(m), ExpiresAt: time.Unix(0, m)}
		}
		res := sluice.Result{Allowed: flags&32 != 0, Decision: dec, Decisions: []sluice.Decision{dec, {Policy: msg}}}
		if flags&128 != 0 {
			res.Decisions = nil
		}
		if got, want := append(AppendResult(nil, res), '\n'), encodingJSON(t, FromResult(res)); !bytes.Equal(got, want) {
			t.Fatalf("AppendResult:\n%s\nencoding/json:\n%s", got, want)
		}
	})
}
