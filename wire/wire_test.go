package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fairshare"

	"google.golang.org/grpc/codes"
)

// TestPolicyRoundTrip: Policy -> JSON -> Policy is the identity, for every
// field the client can send, so that client and server cannot drift.
func TestPolicyRoundTrip(t *testing.T) {
	for _, p := range []sluice.Policy{
		{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Minute},
		{Name: "sw", Algorithm: sluice.SlidingWindow, Limit: 7, Window: 1500 * time.Millisecond, Shadow: true, FailMode: sluice.FailClosed},
		{Name: "log", Algorithm: sluice.SlidingLog, Limit: 3, Window: time.Hour},
		{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 5, Window: time.Second, Burst: 20},
		{Name: "conc", Algorithm: sluice.Concurrency, Limit: 4, LeaseTTL: 30 * time.Second},
		{Name: "q", Algorithm: sluice.Quota, Limit: 1000, Window: 24 * time.Hour, Buckets: 24},
		{Name: "month", Algorithm: sluice.Quota, Limit: 1000, Calendar: sluice.Month},
		{Name: "leased", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Minute, Leased: true},
		{Name: "pen", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Minute, Penalty: sluice.Penalty{After: 2, Base: time.Minute, Max: time.Hour}},
	} {
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		b, err := json.Marshal(FromPolicy(p))
		if err != nil {
			t.Fatal(err)
		}
		var w Policy
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		got, err := w.Decode("policy")
		if err != nil {
			t.Fatalf("%s: %s: %v", p.Name, b, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("%s: round trip through %s gave %+v", p.Name, b, got)
		}
	}
}

// TestResultRoundTrip: a result survives the wire to its precision:
// ResetAt to the second, rounded up, RetryAfter to the millisecond.
func TestResultRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	res := sluice.Result{Decisions: []sluice.Decision{
		{Policy: "a", Allowed: true, Limit: 10, Remaining: 3, ResetAt: now.Add(30 * time.Second), Lease: sluice.Lease{ID: 1<<62 + 7, ExpiresAt: now.Add(time.Minute)}},
		{Policy: "b", Limit: 5, ResetAt: now.Add(1500 * time.Millisecond), RetryAfter: 1500 * time.Millisecond, FailedClosed: true},
		{Policy: "c", Allowed: true, Shadowed: true, FailedOpen: true, Limit: 1, ResetAt: now},
	}}
	res.Decision, res.Allowed = sluice.Reporting(res.Decisions)
	b, err := json.Marshal(FromResult(res))
	if err != nil {
		t.Fatal(err)
	}
	var out CheckResponse
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	got := out.Decode()
	res.Decisions[1].ResetAt = now.Add(2 * time.Second) // rounded up
	res.Decision = res.Decisions[1]
	if !reflect.DeepEqual(got, res) {
		t.Fatalf("round trip through %s:\n got %+v\nwant %+v", b, got, res)
	}
}

// TestAllowedResultRoundTrip: an admitted result's reported decision is
// admitted on the other side too.
func TestAllowedResultRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	res := sluice.Result{Allowed: true, Decisions: []sluice.Decision{{Policy: "a", Allowed: true, Limit: 3, Remaining: 2, ResetAt: now}}}
	res.Decision = res.Decisions[0]
	b, _ := json.Marshal(FromResult(res))
	var out CheckResponse
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.Decode(); !reflect.DeepEqual(got, res) {
		t.Fatalf("round trip through %s:\n got %+v\nwant %+v", b, got, res)
	}
}

// TestStoreErrorsTellNothing: a store's own error text (endpoints, tables)
// never reaches a client.
func TestStoreErrorsTellNothing(t *testing.T) {
	err := &sluice.Error{Op: "dynamostore.get", Kind: sluice.KindUnavailable, Err: errors.New(`Post "http://10.0.0.7:8000/": dial tcp: refused`)}
	if body := ErrorOf(err); body.Error != "unavailable" || body.Message != "the store is unavailable; try again" {
		t.Fatalf("told %+v", body)
	}
}

// TestExplicitValuesThatMeanSomethingElse: burst 0 and a penalty of 0
// offences would silently mean "burst = limit" and "no penalty": refused.
func TestExplicitValuesThatMeanSomethingElse(t *testing.T) {
	for body, field := range map[string]string{
		`{"name":"p","algorithm":"token_bucket","limit":1,"window":"1s","burst":0}`:                  "policy.burst",
		`{"name":"p","algorithm":"fixed_window","limit":1,"window":"1s","penalty":{"after":0}}`:      "policy.penalty.after",
		`{"name":"p","algorithm":"fixed_window","limit":1,"window":"1s","penalty":{"base":"later"}}`: "policy.penalty.base",
		`{"name":"p","algorithm":"fixed_window","limit":1,"window":"soon"}`:                          "policy.window",
		`{"name":"p","algorithm":"leaky","limit":1,"window":"1s"}`:                                   "policy.algorithm",
	} {
		var w Policy
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			t.Fatal(err)
		}
		_, err := w.Decode("policy")
		if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != field {
			t.Errorf("%s: %v, want invalid naming %s", body, err, field)
		}
	}
}

// TestFromRequestRefusesInvalidUTF8: encoding/json would send "\xff" and
// "\xfe" both as U+FFFD, one counter for two keys.
func TestFromRequestRefusesInvalidUTF8(t *testing.T) {
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	_, err := FromRequest(sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "ok"}, {Policy: p, Key: "\xff"}}})
	if sluice.FieldOf(err) != "checks[1].key" {
		t.Fatalf("got %v, want an error naming checks[1].key", err)
	}
	if _, err := FromRequest(sluice.Request{Tenant: "a\xfe", Checks: []sluice.Check{{Policy: p}}}); sluice.FieldOf(err) != "tenant" {
		t.Fatalf("got %v, want an error naming the tenant", err)
	}
}

// TestStatusTable: every kind has one status, and a client reads the kind
// back from it.
func TestStatusTable(t *testing.T) {
	seen := map[int]sluice.Kind{}
	for k := sluice.KindInternal; k <= sluice.KindGone; k++ {
		st := Status(k)
		if other, dup := seen[st]; dup {
			t.Fatalf("kinds %v and %v share status %d", other, k, st)
		}
		seen[st] = k
		if back := KindOfStatus(st); back != k {
			t.Errorf("kind %v -> %d -> %v", k, st, back)
		}
		rec := httptest.NewRecorder()
		WriteError(rec, &sluice.Error{Kind: k, Field: "f", Message: "m"})
		err := ParseError("test", rec.Code, rec.Body.Bytes())
		if sluice.KindOf(err) != k || (k != sluice.KindInternal && sluice.FieldOf(err) != "f") {
			t.Errorf("kind %v answered %d %s, read back as %v", k, rec.Code, rec.Body, err)
		}
	}
	if KindOfStatus(502) != sluice.KindUnavailable || KindOfStatus(504) != sluice.KindUnavailable {
		t.Error("a proxy's 502 and 504 are unavailable")
	}
	if KindOfStatus(413) != sluice.KindInvalid {
		t.Error("a body too large (413) is the request's fault, not the server's")
	}
	rec := httptest.NewRecorder()
	WriteError(rec, errors.New("disk on fire at /secret/path"))
	if rec.Code != 500 || rec.Body.String() != `{"error":"internal","message":"internal error"}`+"\n" {
		t.Errorf("an internal error leaks: %d %s", rec.Code, rec.Body)
	}
}

// TestAcquireWire: a grant and both refusals survive the wire, and a
// refusal carries Retry-After in whole seconds, at least 1.
func TestAcquireWire(t *testing.T) {
	at := time.Date(2026, 11, 23, 7, 0, 0, 123456789, time.FixedZone("x", 3600))
	b, err := json.Marshal(FromGrant(at, 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var grant AcquireResponse
	if err := json.Unmarshal(b, &grant); err != nil || !grant.Granted || grant.Waited.D != 1500*time.Millisecond || grant.WaitedMs != 1500 || !grant.GrantedAt.Equal(at) || grant.GrantedAt.Location() != time.UTC {
		t.Fatalf("%s: %+v %v", b, grant, err)
	}
	for _, tc := range []struct {
		err        error
		retryAfter time.Duration
		header     string
		reason     string
	}{
		{fairshare.ErrShortage, 300 * time.Millisecond, "1", ReasonShortage},
		{fairshare.ErrQueueFull, 2100 * time.Millisecond, "3", ReasonQueueFull},
		{fmt.Errorf("acquire: %w", fairshare.ErrShortage), 0, "1", ReasonShortage},
	} {
		rec := httptest.NewRecorder()
		WriteAcquireError(rec, "partner-api", tc.err, tc.retryAfter)
		var body UpstreamShort
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != 429 || rec.Header().Get("Retry-After") != tc.header || body.Reason != tc.reason || body.Upstream != "partner-api" || body.RetryAfterMs < 1 || !errors.Is(tc.err, body.Err()) {
			t.Errorf("%v: %d Retry-After %q %+v", tc.err, rec.Code, rec.Header().Get("Retry-After"), body)
		}
	}
	rec := httptest.NewRecorder()
	WriteAcquireError(rec, "partner-api", fairshare.ErrClosed, 0)
	if rec.Code != 503 {
		t.Errorf("closed: %d", rec.Code)
	}
}

// Every kind has its gRPC code, by the numbers gRPC gives them.
func TestGRPCCodes(t *testing.T) {
	for k, want := range map[sluice.Kind]codes.Code{
		sluice.KindInternal: codes.Internal, sluice.KindInvalid: codes.InvalidArgument, sluice.KindNotFound: codes.NotFound,
		sluice.KindUnavailable: codes.Unavailable, sluice.KindConflict: codes.AlreadyExists, sluice.KindUnauthorized: codes.Unauthenticated,
		sluice.KindForbidden: codes.PermissionDenied, sluice.KindGone: codes.NotFound, sluice.KindExhausted: codes.ResourceExhausted,
	} {
		if got := codes.Code(GRPCCode(k)); got != want {
			t.Errorf("%v: %v, want %v", k, got, want)
		}
	}
}

// A notice is written as the gateway's frames always were: as a map of
// the same fields would be, keys in order, an id only where one is named.
func TestWSNoticeAsBefore(t *testing.T) {
	id, ms := "m-1", int64(1500)
	for _, tc := range []struct {
		notice WSNotice
		old    map[string]any
	}{
		{WSNotice{Error: WSBadRequest, Message: "want"}, map[string]any{"error": "Bad Request", "message": "want"}},
		{WSNotice{Error: WSThrottled, Message: "m", RetryAfterMs: &ms, ID: &id}, map[string]any{"error": "Too Many Requests", "message": "m", "retryAfterMs": ms, "id": id}},
		{WSNotice{Duplicate: true, Message: "d", ID: new(string)}, map[string]any{"duplicate": true, "message": "d", "id": ""}},
	} {
		got, _ := json.Marshal(tc.notice)
		want, _ := json.Marshal(tc.old)
		if string(got) != string(want) {
			t.Errorf("%s, want %s", got, want)
		}
	}
}

// TestParseErrorNamesFieldOnce: an error read back from the server's body
// names its field once, as the error that was written does, though the
// body's message names it too (for readers of the body alone).
func TestParseErrorNamesFieldOnce(t *testing.T) {
	for _, in := range []*sluice.Error{
		{Kind: sluice.KindInvalid, Field: "checks[0].policy.limit", Message: "must be between 1 and 10, got 0"},
		{Kind: sluice.KindNotFound, Field: "policy", Message: `"nope" is not configured`},
		{Kind: sluice.KindInvalid, Message: "no field"},
	} {
		rec := httptest.NewRecorder()
		WriteError(rec, in)
		got := ParseError("client.check", rec.Code, rec.Body.Bytes())
		if want := "client.check: " + in.Error(); got.Error() != want || sluice.FieldOf(got) != in.Field {
			t.Errorf("read back %q (field %q), want %q (field %q)", got, sluice.FieldOf(got), want, in.Field)
		}
	}
}
