package wire

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestReadBody: a body of MaxBodyBytes is read whole; one byte more is
// ErrBodyTooLarge, answered 413 naming the body, and the rest of it
// drained so that the connection stays open (up to 16 MiB); a body
// declared larger than that, or one whose client waits for "100
// Continue", is not read, and the connection closes. Invalid text is
// refused 400 naming where.
func TestReadBody(t *testing.T) {
	for _, tc := range []struct {
		name      string
		body      string
		length    int64 // the declared Content-Length; -1: unknown
		expect    bool  // Expect: 100-continue
		wantErr   error
		wantClose bool
	}{
		{"at the limit", strings.Repeat("x", MaxBodyBytes), -1, false, nil, false},
		{"one byte over, chunked", strings.Repeat("x", MaxBodyBytes+1), -1, false, ErrBodyTooLarge, false},
		{"declared over", strings.Repeat("x", MaxBodyBytes+1), MaxBodyBytes + 1, false, ErrBodyTooLarge, false},
		{"declared over, waiting to be told", strings.Repeat("x", MaxBodyBytes+1), MaxBodyBytes + 1, true, ErrBodyTooLarge, true},
		{"declared past the drain", "x", 17 << 20, false, ErrBodyTooLarge, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
			r.ContentLength = tc.length
			if tc.expect {
				r.Header.Set("Expect", "100-continue")
			}
			w := httptest.NewRecorder()
			b, err := ReadBody(w, r)
			if !errors.Is(err, tc.wantErr) || err == nil && string(b) != tc.body {
				t.Fatalf("ReadBody = %d bytes, %v; want the body whole or %v", len(b), err, tc.wantErr)
			}
			if closed := w.Header().Get("Connection") == "close"; closed != tc.wantClose {
				t.Errorf("Connection: close is %v, want %v", closed, tc.wantClose)
			}
			if err == nil {
				return
			}
			WriteError(w, err)
			got := ParseError("test", w.Code, w.Body.Bytes())
			if w.Code != 413 || sluice.FieldOf(got) != "body" || sluice.KindOf(got) != sluice.KindInvalid {
				t.Errorf("answered %d %s, want 413 naming the body", w.Code, w.Body)
			}
		})
	}

	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"key":"\ud800"}`))
	if _, err := ReadBody(httptest.NewRecorder(), r); sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "key" {
		t.Errorf("a lone surrogate: %v, want invalid naming key", err)
	}
}
