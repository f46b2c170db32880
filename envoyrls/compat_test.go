package envoyrls

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

// compatNow is the clock of the compatible mode's tests: 30 s into a
// minute.
var compatNow = time.Date(2026, 11, 23, 12, 0, 30, 500_000_000, time.UTC)

// newCompat is a Service of yaml on a memory store, at compatNow, with
// opts (their Limiter, Config and Now filled in).
func newCompat(t *testing.T, yaml string, opts Options) *Service {
	t.Helper()
	return newServiceFiles(t, []File{{Name: "test.yaml", Data: []byte(yaml)}}, compatNow, opts)
}

// newServiceFiles is a Service of files on a memory store, at now, with
// opts (their Limiter, Config and Now filled in).
func newServiceFiles(t *testing.T, files []File, now time.Time, opts Options) *Service {
	t.Helper()
	c, err := Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	clock := func() time.Time { return now }
	opts.Limiter = engine.New(s, engine.Options{Now: clock})
	opts.Config = func() *Config { return c }
	opts.Now = clock
	return New(opts)
}

func askDomain(t *testing.T, svc *Service, domain string, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func wantOverall(t *testing.T, what string, resp *rlspb.RateLimitResponse, code rlspb.RateLimitResponse_Code) {
	t.Helper()
	if resp.OverallCode != code {
		t.Errorf("%s: overall %v, want %v", what, resp.OverallCode, code)
	}
}

const (
	codeOK   = rlspb.RateLimitResponse_OK
	codeOver = rlspb.RateLimitResponse_OVER_LIMIT
)

// quotas has a regular limit, two quota-mode ones, a quota-mode ban, and
// a domain whose descriptor of the same key is not in quota mode.
const quotas = `
domain: q
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: banned
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: nolimit
    quota_mode: true
`

// TestQuotaModeLoads: quota_mode is accepted on a rule, and on a
// descriptor without one, where it does nothing, as in the reference.
func TestQuotaModeLoads(t *testing.T) {
	c, err := parse(t, quotas)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := c.match("q", []entry{{"quota", "x"}}); r == nil || !r.QuotaMode {
		t.Errorf("quota: %+v, want a quota-mode rule", r)
	}
	if r, _ := c.match("q", []entry{{"regular", "x"}}); r == nil || r.QuotaMode {
		t.Errorf("regular: %+v, want a rule not in quota mode", r)
	}
}

// TestQuotaMode: the reference's quota rule. A quota-mode descriptor over
// its limit denies the request only when every quota-mode descriptor of
// it is over; one not in quota mode denies as usual. All-or-nothing, a
// request admitted with a quota-mode descriptor over consumes from every
// descriptor that admits it, and not from the one over; a denied request
// consumes nothing.
func TestQuotaMode(t *testing.T) {
	for _, perDescriptor := range []bool{false, true} {
		t.Run(map[bool]string{false: "all-or-nothing", true: "per descriptor"}[perDescriptor], func(t *testing.T) {
			svc := newCompat(t, quotas, Options{PerDescriptor: perDescriptor})
			regular, quota, quota2 := descriptor("regular", "a"), descriptor("quota", "a"), descriptor("quota2", "a")
			resp := askDomain(t, svc, "q", regular, quota)
			wantOverall(t, "first", resp, codeOK)
			check(t, "first, regular", resp.Statuses[0], codeOK, 5, 4, 30)
			check(t, "first, quota", resp.Statuses[1], codeOK, 1, 0, 30)

			// The quota is over, but it is the request's only one: over.
			resp = askDomain(t, svc, "q", regular, quota)
			wantOverall(t, "second, the only quota over", resp, codeOver)
			check(t, "second, quota", resp.Statuses[1], codeOver, 1, 0, 30)
			left := uint32(4) // all-or-nothing: the denied request consumed nothing
			if perDescriptor {
				left = 3
			}
			check(t, "second, regular", resp.Statuses[0], codeOK, 5, left, 30)

			// With a second quota within its limit, the first over does
			// not deny: the request is admitted, and consumes from the
			// regular limit and the second quota.
			resp = askDomain(t, svc, "q", regular, quota, quota2)
			wantOverall(t, "third, one quota of two over", resp, codeOK)
			check(t, "third, regular", resp.Statuses[0], codeOK, 5, left-1, 30)
			check(t, "third, quota", resp.Statuses[1], codeOver, 1, 0, 30)
			check(t, "third, quota2", resp.Statuses[2], codeOK, 2, 1, 30)

			// A quota-mode ban is a quota over, without a store call.
			resp = askDomain(t, svc, "q", regular, descriptor("banned", "a"), quota2)
			wantOverall(t, "a quota-mode ban beside a quota within", resp, codeOK)
			check(t, "the ban", resp.Statuses[1], codeOver, 0, 0, 30)
			check(t, "quota2, beside the ban", resp.Statuses[2], codeOK, 2, 0, 30)
			check(t, "regular, beside the ban", resp.Statuses[0], codeOK, 5, left-2, 30)

			// Every quota over: over, and all-or-nothing nothing counted.
			resp = askDomain(t, svc, "q", regular, quota, quota2)
			wantOverall(t, "every quota over", resp, codeOver)
			if !perDescriptor {
				check(t, "every quota over, regular", resp.Statuses[0], codeOK, 5, left-2, 30)
			}
		})
	}
}

// TestQuotaModeRegularDenies: a descriptor not in quota mode over its limit
// denies the request even when the quota-mode ones admit; all-or-nothing,
// they consume nothing.
func TestQuotaModeRegularDenies(t *testing.T) {
	svc := newCompat(t, quotas, Options{})
	regular, quota2 := descriptor("regular", "b"), descriptor("quota2", "b")
	for range 5 {
		askDomain(t, svc, "q", regular)
	}
	resp := askDomain(t, svc, "q", regular, quota2)
	wantOverall(t, "regular over", resp, codeOver)
	check(t, "regular over", resp.Statuses[0], codeOver, 5, 0, 30)
	check(t, "quota2, not consumed", resp.Statuses[1], codeOK, 2, 2, 30)
}

// TestGlobalQuotaMode: Options.QuotaMode makes every descriptor a quota-mode
// one: the request is over only when all are; a descriptor without a limit
// counts as one within, as in the reference.
func TestGlobalQuotaMode(t *testing.T) {
	svc := newCompat(t, quotas, Options{QuotaMode: true})
	regular := descriptor("regular", "c")
	for range 5 {
		askDomain(t, svc, "q", regular)
	}
	resp := askDomain(t, svc, "q", regular, descriptor("quota2", "c"))
	wantOverall(t, "regular over, quota2 within, all in quota mode", resp, codeOK)
	check(t, "regular", resp.Statuses[0], codeOver, 5, 0, 30)
	check(t, "quota2", resp.Statuses[1], codeOK, 2, 1, 30)
	resp = askDomain(t, svc, "q", regular)
	wantOverall(t, "regular over alone", resp, codeOver)
	resp = askDomain(t, svc, "q", regular, descriptor("nolimit", "c"))
	wantOverall(t, "regular over beside a descriptor without a limit", resp, codeOK)
	// Without the option, the same request is over.
	svc = newCompat(t, quotas, Options{})
	for range 5 {
		askDomain(t, svc, "q", regular)
	}
	wantOverall(t, "without QuotaMode", askDomain(t, svc, "q", regular, descriptor("quota2", "c")), codeOver)
}

// TestQuotaModeStaysInItsDomain: one domain's quota_mode does not reach
// another's descriptor of the same key.
func TestQuotaModeStaysInItsDomain(t *testing.T) {
	svc := newServiceFiles(t, []File{
		{Name: "q.yaml", Data: []byte(quotas)},
		{Name: "p.yaml", Data: []byte("domain: p\ndescriptors:\n  - key: quota\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: quota2\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")},
	}, compatNow, Options{})
	quota, quota2 := descriptor("quota", "d"), descriptor("quota2", "d")
	askDomain(t, svc, "p", quota, quota2)
	resp := askDomain(t, svc, "p", quota, quota2)
	wantOverall(t, "p's quota, not in quota mode in p, over", resp, codeOver)
	check(t, "p's quota", resp.Statuses[0], codeOver, 1, 0, 30)
}

// TestShadowMode: Options.ShadowMode answers OK whatever the descriptors
// say, keeps their statuses, and counts as enforcing would: the request
// enforcement denies consumes nothing. Shadow wins over quota mode too.
func TestShadowMode(t *testing.T) {
	for _, quota := range []bool{false, true} {
		svc := newCompat(t, quotas, Options{ShadowMode: true, QuotaMode: quota, Headers: DefaultHeaders})
		regular, quota2 := descriptor("regular", "s"), descriptor("quota2", "s")
		for i := range 2 {
			resp := askDomain(t, svc, "q", regular, quota2)
			wantOverall(t, "within", resp, codeOK)
			check(t, "within, quota2", resp.Statuses[1], codeOK, 2, uint32(1-i), 30)
		}
		resp := askDomain(t, svc, "q", regular, quota2)
		wantOverall(t, "quota2 over, in shadow mode", resp, codeOK)
		check(t, "quota2 over", resp.Statuses[1], codeOver, 2, 0, 30)
		left := uint32(3) // the request enforcement denies consumes nothing
		if quota {
			left = 2 // quota mode admits it: regular is within its limit
		}
		check(t, "regular", resp.Statuses[0], codeOK, 5, left, 30)
		resp = askDomain(t, svc, "q", quota2)
		wantOverall(t, "quota2 over alone, in shadow mode", resp, codeOK)
		if h := resp.ResponseHeadersToAdd; len(h) != 3 || h[0].Value != "2" || h[1].Value != "0" {
			t.Errorf("headers %v, want those of quota2, 0 left", h)
		}
		resp = askDomain(t, svc, "q", descriptor("banned", "s"))
		wantOverall(t, "a ban, in shadow mode", resp, codeOK)
		check(t, "a ban", resp.Statuses[0], codeOver, 0, 0, 30)
	}
}

// metadatas has rules with metadata, two of which share a structure.
const metadatas = `
domain: m
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata:
      name: service_1
      owner: {team: a, tags: [x, 1]}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      name: service_2
      owner: {team: b, oncall: bob}
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {some_other_name: service_3}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {free: true}
`

// TestDynamicMetadata: with Options.DynamicMetadata, an answer carries the
// domain, the descriptors, the request's hits_addend and the merged
// metadata of the rules of the descriptors that passed, the first value of
// a key winning and structures merged, as envoyproxy/ratelimit builds it;
// the configuration's metadata is never changed by a merge.
func TestDynamicMetadata(t *testing.T) {
	svc := newCompat(t, metadatas, Options{DynamicMetadata: true, QuotaMode: true})
	regular, quota, other := descriptor("regular", "r"), descriptor("quota", "q"), descriptor("other", "o")
	ctx := context.Background()
	resp, err := svc.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "m", HitsAddend: 1,
		Descriptors: []*ratelimitpb.RateLimitDescriptor{regular, quota, other, descriptor("free", "f")}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := protojson.Marshal(resp.DynamicMetadata)
	want := `{"descriptors":[{"entries":["regular=r"]},{"entries":["quota=q"]},{"entries":["other=o"]},{"entries":["free=f"]}],` +
		`"domain":"m","hitsAddend":1,"metadata":{"name":"service_1","owner":{"oncall":"bob","tags":["x",1],"team":"a"},"some_other_name":"service_3"}}`
	if !jsonEqual(t, got, want) {
		t.Errorf("every descriptor passed:\n got %s\nwant %s", got, want)
	}
	// The quota is over now: its metadata is left out; the request is
	// admitted (in quota mode, the regular limit is within), as in the
	// reference.
	resp = askDomain(t, svc, "m", regular, quota)
	wantOverall(t, "quota over", resp, codeOK)
	got, _ = protojson.Marshal(resp.DynamicMetadata.Fields["metadata"])
	if want := `{"name":"service_1","owner":{"tags":["x",1],"team":"a"}}`; !jsonEqual(t, got, want) {
		t.Errorf("quota over: metadata %s, want %s", got, want)
	}
	// The merge above did not reach the configuration's metadata.
	c := svc.opts.Config()
	r, _ := c.match("m", []entry{{"regular", "r"}})
	if b, _ := protojson.Marshal(r.Metadata); !jsonEqual(t, b, `{"name":"service_1","owner":{"tags":["x",1],"team":"a"}}`) {
		t.Errorf("the rule's metadata changed: %s", b)
	}
	// No metadata from a rule: no "metadata" field.
	resp = askDomain(t, svc, "m", descriptor("plain", "p"))
	if _, ok := resp.DynamicMetadata.Fields["metadata"]; ok || resp.DynamicMetadata.Fields["domain"].GetStringValue() != "m" {
		t.Errorf("no rule's metadata: %v", resp.DynamicMetadata)
	}
	// Off by default.
	svc = newCompat(t, metadatas, Options{})
	if resp := askDomain(t, svc, "m", regular); resp.DynamicMetadata != nil {
		t.Errorf("without the option: %v", resp.DynamicMetadata)
	}
}

// TestDynamicMetadataStaysInItsDomain: a domain's metadata is never in
// another domain's answer, whatever its descriptors.
func TestDynamicMetadataStaysInItsDomain(t *testing.T) {
	svc := newServiceFiles(t, []File{
		{Name: "m.yaml", Data: []byte(metadatas)},
		{Name: "n.yaml", Data: []byte("domain: n\ndescriptors:\n  - key: regular\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")},
	}, compatNow, Options{DynamicMetadata: true})
	for _, domain := range []string{"n", "nope"} {
		resp := askDomain(t, svc, domain, descriptor("regular", "r"), descriptor("other", "o"))
		if _, ok := resp.DynamicMetadata.Fields["metadata"]; ok {
			t.Errorf("domain %s carries metadata: %v", domain, resp.DynamicMetadata)
		}
	}
}

// jsonEqual reports whether JSON a and b hold the same value.
func jsonEqual(t *testing.T, a []byte, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// TestHeadersValidate: a header's name is an HTTP token, so that nothing
// but a name can be written where Envoy writes one; the three differ.
func TestHeadersValidate(t *testing.T) {
	if err := DefaultHeaders.Validate(); err != nil {
		t.Errorf("the reference's names: %v", err)
	}
	if err := (Headers{"X-RL-Limit", "x-rl_remaining", "X.RL~Reset!"}).Validate(); err != nil {
		t.Errorf("tokens: %v", err)
	}
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	for _, tc := range []struct {
		h     Headers
		field string
	}{
		{Headers{"", "R", "S"}, "limit"},
		{Headers{"L", "X-Evil\r\nSet-Cookie: a=b", "S"}, "remaining"},
		{Headers{"L", "R", "X Reset"}, "reset"},
		{Headers{"L", "R", ":authority"}, "reset"},
		{Headers{"L", "R", "Résumé"}, "reset"},
		{Headers{"L", "R", "a\x00b"}, "reset"},
		{Headers{string(long), "R", "S"}, "limit"},
		{Headers{"X-A", "x-a", "S"}, "remaining"},
	} {
		err := tc.h.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+" ") {
			t.Errorf("%q: %v, want an error naming %s", tc.h, err, tc.field)
		}
	}
}

// TestCustomHeaders: the RateLimit headers take the names given, as the
// reference's LIMIT_*_HEADER settings do.
func TestCustomHeaders(t *testing.T) {
	svc := newCompat(t, quotas, Options{Headers: Headers{"X-Limit", "X-Left", "X-Reset"}})
	resp := askDomain(t, svc, "q", descriptor("regular", "h"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if len(got) != 3 || got["X-Limit"] != "5" || got["X-Left"] != "4" || got["X-Reset"] != "30" {
		t.Errorf("headers %v, want X-Limit 5, X-Left 4, X-Reset 30", got)
	}
}

// TestMergeDomains: with MergeDomains the files of one domain make one
// domain, in the order of their names; the same descriptor at the top of
// two files is an error naming the second; another domain stays apart.
// Without it, a domain in two files is an error, as before.
func TestMergeDomains(t *testing.T) {
	a := File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    value: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: w\n    value: x*\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")}
	b := File{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    value: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: w\n    value: xy*\n    rate_limit: {unit: minute, requests_per_unit: 4}\n")}
	e := File{Name: "e.yaml", Data: []byte("domain: e\ndescriptors:\n  - key: k\n    value: a\n    rate_limit: {unit: minute, requests_per_unit: 9}\n")}
	if _, err := Parse([]File{a, b}); err == nil || !strings.Contains(err.Error(), "b.yaml") {
		t.Errorf("without merging: %v, want an error naming b.yaml", err)
	}
	c, err := Loading{MergeDomains: true}.Parse([]File{a, b, e})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain string
		e      entry
		want   int64
	}{
		{"d", entry{"k", "a"}, 1}, {"d", entry{"k", "b"}, 2}, {"e", entry{"k", "a"}, 9}, {"e", entry{"k", "b"}, 0},
		{"d", entry{"w", "xyz"}, 3}, // the first file's wildcard comes first
	} {
		r, _ := c.match(tc.domain, []entry{tc.e})
		got := int64(0)
		if r != nil {
			got = r.Limits[0].Policy.Limit
		}
		if got != tc.want {
			t.Errorf("%s %v: limit %d, want %d", tc.domain, tc.e, got, tc.want)
		}
	}
	if ds := c.Domains(); strings.Join(ds, ",") != "d,e" {
		t.Errorf("domains %v", ds)
	}
	// The same descriptor at the top of two files: refused.
	again := File{Name: "c.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    value: a\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")}
	if _, err := (Loading{MergeDomains: true}).Parse([]File{a, b, again}); err == nil || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), `duplicate descriptor "d.k_a"`) {
		t.Errorf("a descriptor in two files: %v, want an error naming c.yaml and d.k_a", err)
	}
}

// TestCounting: the countings' names; PerDescriptor and Reference decide
// each descriptor on its own, an admitted one consuming when another
// denies; AllOrNothing consumes nothing for a denied request;
// Options.PerDescriptor is PerDescriptor.
func TestCounting(t *testing.T) {
	for _, c := range []Counting{AllOrNothing, PerDescriptor, Reference} {
		if got, err := ParseCounting(c.String()); err != nil || got != c {
			t.Errorf("%v: parsed %v, %v", c, got, err)
		}
	}
	if _, err := ParseCounting("per_descriptor"); err == nil {
		t.Error("per_descriptor parsed")
	}
	for _, tc := range []struct {
		name string
		opts Options
		left uint32 // the regular limit's, after a denied request
	}{
		{"zero", Options{}, 5},
		{"all-or-nothing", Options{Counting: AllOrNothing}, 5},
		{"PerDescriptor true", Options{PerDescriptor: true}, 4},
		{"per-descriptor", Options{Counting: PerDescriptor}, 4},
		{"reference", Options{Counting: Reference}, 4},
	} {
		svc := newCompat(t, quotas, tc.opts)
		askDomain(t, svc, "q", descriptor("quota", "c"))
		resp := askDomain(t, svc, "q", descriptor("regular", "c"), descriptor("quota", "c"))
		wantOverall(t, tc.name, resp, codeOver)
		check(t, tc.name+", regular", resp.Statuses[0], codeOK, 5, tc.left, 30)
		resp = askDomain(t, svc, "q", descriptor("regular", "c"))
		check(t, tc.name+", regular after", resp.Statuses[0], codeOK, 5, tc.left-1, 30)
	}
}

// failedLimiter answers every check as a store that failed would be
// answered: by the fail modes, open.
type failedLimiter struct{}

func (failedLimiter) Check(_ context.Context, req sluice.Request) (sluice.Result, error) {
	res := sluice.Result{Allowed: true, Decisions: make([]sluice.Decision, len(req.Checks))}
	for i := range res.Decisions {
		res.Decisions[i] = sluice.Decision{Allowed: true, FailedOpen: true}
	}
	return res, nil
}

// TestReferenceErrors: with Options.ReferenceErrors, the reference's
// errors: Unknown, its texts; a store that failed is an Unknown error, not
// the fail modes' answer, and a limiter's error too. Without it, the
// fail modes answer, and the errors are InvalidArgument. No configuration
// loaded is the reference's error either way.
func TestReferenceErrors(t *testing.T) {
	c, err := parse(t, quotas)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := &rlspb.RateLimitRequest{Domain: "q", Descriptors: []*ratelimitpb.RateLimitDescriptor{descriptor("regular", "e")}}
	for _, ref := range []bool{false, true} {
		svc := New(Options{Limiter: failedLimiter{}, Config: func() *Config { return c }, ReferenceErrors: ref})
		for _, tc := range []struct {
			req       *rlspb.RateLimitRequest
			code, ref codes.Code
			text      string // with ReferenceErrors
		}{
			{&rlspb.RateLimitRequest{Descriptors: good.Descriptors}, codes.InvalidArgument, codes.Unknown, "rate limit domain must not be empty"},
			{&rlspb.RateLimitRequest{Domain: "q"}, codes.InvalidArgument, codes.Unknown, "rate limit descriptor list must not be empty"},
			{good, codes.OK, codes.Unknown, "the rate limit store failed; no decision"},
		} {
			resp, err := svc.ShouldRateLimit(ctx, tc.req)
			st, _ := status.FromError(err)
			switch {
			case ref && (st.Code() != tc.ref || st.Message() != tc.text):
				t.Errorf("reference errors, %v: %v %q, want %v %q", tc.req, st.Code(), st.Message(), tc.ref, tc.text)
			case !ref && st.Code() != tc.code:
				t.Errorf("%v: %v, want %v", tc.req, err, tc.code)
			case !ref && tc.code == codes.OK && resp.OverallCode != codeOK:
				t.Errorf("failed open: %v, want OK", resp)
			}
		}
		svc = New(Options{Limiter: failingLimiter{errors.New("dial tcp: secret-host")}, Config: func() *Config { return c }, ReferenceErrors: ref})
		_, err := svc.ShouldRateLimit(ctx, good)
		if st, _ := status.FromError(err); ref && (st.Code() != codes.Unknown || strings.Contains(st.Message(), "secret")) {
			t.Errorf("a limiter's error: %v", err)
		}
		svc = New(Options{Limiter: failedLimiter{}, Config: func() *Config { return nil }, ReferenceErrors: ref})
		_, err = svc.ShouldRateLimit(ctx, good)
		if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "no rate limit configuration loaded" {
			t.Errorf("no configuration: %v", err)
		}
	}
}

// TestStartWithoutConfig: with StartWithoutConfig a Watcher starts on a
// directory that does not load, missing or bad, holding no configuration
// (calls fail with the reference's error), and loads it once it changes
// and settles; without, it does not start.
func TestStartWithoutConfig(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name  string
		setup func(dir string) // the directory at start
	}{
		{"missing", func(string) {}},
		{"bad", func(dir string) {
			os.Mkdir(dir, 0o700)
			os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "config")
			tc.setup(dir)
			if _, err := NewWatcher(dir, Loading{}, log, nil); err == nil {
				t.Fatal("started without StartWithoutConfig")
			}
			var reloads []bool
			w, err := NewWatcher(dir, Loading{StartWithoutConfig: true}, log, func(ok bool) { reloads = append(reloads, ok) })
			if err != nil {
				t.Fatal(err)
			}
			if c := w.Config(); c != nil {
				t.Fatalf("configuration %v, want none", c.Domains())
			}
			svc := New(Options{Limiter: failedLimiter{}, Config: w.Config})
			_, err = svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{descriptor("k", "v")}})
			if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "no rate limit configuration loaded" {
				t.Errorf("a call without configuration: %v", err)
			}
			w.Poll()
			w.Poll()
			if w.Config() != nil {
				t.Fatal("a directory that does not load loaded")
			}
			os.MkdirAll(dir, 0o700)
			os.Remove(filepath.Join(dir, "bad.yaml"))
			if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			w.Poll()
			w.Poll()
			if c := w.Config(); c == nil || !c.HasDomain("d") {
				t.Fatalf("after a good file: %v, want domain d", c.Domains())
			}
			if len(reloads) == 0 || !reloads[len(reloads)-1] {
				t.Errorf("reloads %v, want the last a success", reloads)
			}
		})
	}
}

// readOf makes d a read: its own hits_addend of 0 (the request's 0 means
// one hit).
func readOf(d *ratelimitpb.RateLimitDescriptor) *ratelimitpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(0)
	return d
}

// TestReferenceBurns: under Reference counting a denied descriptor's hits
// are added too, as the reference's INCRBY adds them
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false): 8 then 5 hits of a
// limit of 10 leave 13, so that a read (hits_addend 0) answers OVER_LIMIT
// until the window turns. PerDescriptor adds nothing for the denied 5; a
// rule of a Sluice algorithm that cannot burn counts as PerDescriptor.
func TestReferenceBurns(t *testing.T) {
	const yaml = `
domain: b
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: g
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket}
`
	ask := func(svc *Service, hits uint32, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "b", Descriptors: ds, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name     string
		counting Counting
		readCode rlspb.RateLimitResponse_Code
		readLeft uint32
	}{
		{"reference", Reference, codeOver, 0},
		{"per-descriptor", PerDescriptor, codeOK, 2},
	} {
		svc := newCompat(t, yaml, Options{Counting: tc.counting})
		check(t, tc.name+", 8 hits", ask(svc, 8, descriptor("k", "x")).Statuses[0], codeOK, 10, 2, 30)
		check(t, tc.name+", 5 more", ask(svc, 5, descriptor("k", "x")).Statuses[0], codeOver, 10, 0, 30)
		read := ask(svc, 0, readOf(descriptor("k", "x")))
		wantOverall(t, tc.name+", a read", read, tc.readCode)
		check(t, tc.name+", a read", read.Statuses[0], tc.readCode, 10, tc.readLeft, 30)

		// The token bucket's denied hits are not added in either mode.
		ask(svc, 8, descriptor("g", "x"))
		if got := ask(svc, 5, descriptor("g", "x")); got.OverallCode != codeOver {
			t.Errorf("%s: 5 more of the bucket: %v, want OVER_LIMIT", tc.name, got.OverallCode)
		}
		if got := ask(svc, 0, readOf(descriptor("g", "x"))); got.OverallCode != codeOK || got.Statuses[0].GetLimitRemaining() != 2 {
			t.Errorf("%s: a read of the bucket: %v, %d left; want OK, 2 left", tc.name, got.OverallCode, got.Statuses[0].GetLimitRemaining())
		}
	}
}
