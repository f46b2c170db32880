package httpapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestBodyOverLimit: a body over 64 KiB is answered 413 with the error
// body naming the body, and counts nothing; one of 64 KiB is read.
func TestBodyOverLimit(t *testing.T) {
	f := newFixture(t)
	const policy = `{"name":"chat","algorithm":"fixed_window","limit":3,"window":"60s"}`
	pad := func(n int) string {
		head := `{"tenant":"acme","checks":[{"policy":` + policy + `}],"pad":"`
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	resp, body := f.post(t, "/v1/check", pad(MaxBodyBytes+1))
	if resp.StatusCode != 413 || body["error"] != "invalid_request" || body["field"] != "body" {
		t.Fatalf("a body of 64 KiB and 1 byte: %d %v, want 413 naming the body", resp.StatusCode, body)
	}
	// The body is read whole, 64 KiB: its unknown member is what is wrong.
	if resp, body := f.post(t, "/v1/check", pad(MaxBodyBytes)); resp.StatusCode != 400 || body["field"] != "pad" {
		t.Fatalf("a body of 64 KiB: %d %v, want 400 naming pad", resp.StatusCode, body)
	}
	p := sluice.Policy{Name: "chat", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Minute}
	if d, err := f.eng.Allow(context.Background(), "acme", &p, "", 0); err != nil || d.Remaining != 3 {
		t.Fatalf("after the refusals: %+v %v, want nothing counted", d, err)
	}
}
