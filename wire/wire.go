// Package wire holds the JSON that Sluice's HTTP API speaks: the bodies of
// a decision's request and answer, policies, and errors, with the one table
// from error kinds to HTTP statuses. The server (httpapi, gateway,
// httplimit) and the Go client (client) both use it, so that they cannot
// drift apart; wire_test.go round-trips every field. upstream.go holds the
// fair-share acquire's bodies; decode.go and checkbody.go decode the
// server's request bodies strictly, naming the field at fault by its path
// ("checks[1].policy.windw"), and httpapi only reads them.
package wire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// CheckRequest is the body of POST /v1/check: inline policies (Checks), or
// named ones (an Endpoint of the configuration, or Policies by name, with
// the Key parts their counters are keyed by).
type CheckRequest struct {
	Tenant string `json:"tenant,omitempty"`
	// Hits is the request's cost; absent means 1, zero reads the state.
	Hits     *int64            `json:"hits,omitempty"`
	Checks   []Check           `json:"checks,omitempty"`
	Endpoint string            `json:"endpoint,omitempty"`
	Policies []string          `json:"policies,omitempty"`
	Key      map[string]string `json:"key,omitempty"`
}

// Check is one inline check: a policy and the key of its counter.
type Check struct {
	Key    string  `json:"key"`
	Policy *Policy `json:"policy"`
}

// Policy is a policy on the wire. Durations are Go duration strings
// ("60s", "1h") or numbers of seconds. A field that is absent takes the
// policy's default; an explicit value that would silently mean something
// else (burst 0, a penalty with after 0) is refused.
type Policy struct {
	Name      string    `json:"name"`
	Algorithm string    `json:"algorithm"`
	Limit     int64     `json:"limit"`
	Window    *Duration `json:"window,omitempty"`
	Burst     *int64    `json:"burst,omitempty"`
	LeaseTTL  *Duration `json:"leaseTTL,omitempty"`
	Buckets   int       `json:"buckets,omitempty"`
	Calendar  string    `json:"calendar,omitempty"`
	Shadow    bool      `json:"shadow,omitempty"`
	FailMode  string    `json:"failMode,omitempty"`
	Penalty   *Penalty  `json:"penalty,omitempty"`
	Leased    bool      `json:"leased,omitempty"`
	Scope     string    `json:"scope,omitempty"`
}

// Penalty is a policy's penalty box: a key denied After times in a row is
// blocked for Base, doubling up to Max.
type Penalty struct {
	After int       `json:"after"`
	Base  *Duration `json:"base,omitempty"`
	Max   *Duration `json:"max,omitempty"`
}

// Duration is a duration on the wire: encoded as a Go duration string,
// decoded from one or from a number of seconds. Decoding never fails on
// the value itself, so that the error can name the field: Policy.Decode
// reports a bad one.
type Duration struct {
	D   time.Duration
	err error
}

// Dur returns d for the wire, or nil for zero (absent).
func Dur(d time.Duration) *Duration {
	if d == 0 {
		return nil
	}
	return &Duration{D: d}
}

// MarshalJSON encodes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.D.String()) }

// UnmarshalJSON decodes a duration string or a number of seconds; a bad
// value is kept as an error for Err.
func (d *Duration) UnmarshalJSON(b []byte) error {
	d.D, d.err = ParseDuration(b)
	return nil
}

// Err returns what was wrong with the decoded value, if anything.
func (d *Duration) Err() error {
	if d == nil {
		return nil
	}
	return d.err
}

func (d *Duration) value() time.Duration {
	if d == nil {
		return 0
	}
	return d.D
}

// ParseDuration accepts a JSON Go duration string ("1m", "1h30m",
// "500ms") or a number of seconds. null is zero.
func ParseDuration(raw []byte) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("is not a duration like \"60s\" or \"1h\": %q", s)
		}
		return d, nil
	}
	secs, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, fmt.Errorf("must be a duration string like \"60s\" or a number of seconds, got %s", raw)
	}
	if limit := 2 * float64(sluice.MaxWindow/time.Second); secs > limit || secs < -limit {
		return 0, fmt.Errorf("%v seconds is out of range", secs)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// FromPolicy returns p on the wire.
func FromPolicy(p sluice.Policy) *Policy {
	w := &Policy{
		Name: p.Name, Algorithm: p.Algorithm.String(), Limit: p.Limit,
		Window: Dur(p.Window), LeaseTTL: Dur(p.LeaseTTL), Buckets: p.Buckets, Calendar: p.Calendar.String(),
		Shadow: p.Shadow, Leased: p.Leased,
	}
	if p.Burst != 0 {
		w.Burst = &p.Burst
	}
	if p.FailMode != sluice.FailOpen {
		w.FailMode = p.FailMode.String()
	}
	if p.Scope != sluice.ScopeGlobal {
		w.Scope = p.Scope.String()
	}
	if p.Penalty != (sluice.Penalty{}) {
		w.Penalty = &Penalty{After: p.Penalty.After, Base: Dur(p.Penalty.Base), Max: Dur(p.Penalty.Max)}
	}
	return w
}

// Decode returns the policy w describes, or a KindInvalid *sluice.Error
// naming the field under prefix (such as "checks[0].policy"). It decodes;
// Policy.Validate checks the bounds.
func (w *Policy) Decode(prefix string) (sluice.Policy, error) {
	field := func(f string) string { return prefix + "." + f }
	p := sluice.Policy{Name: w.Name, Limit: w.Limit, Buckets: w.Buckets, Shadow: w.Shadow, Leased: w.Leased}
	var err error
	if w.Algorithm != "" { // missing is reported by Policy.Validate
		if p.Algorithm, err = sluice.ParseAlgorithm(w.Algorithm); err != nil {
			return p, sluice.Invalid(field("algorithm"), "%v", err)
		}
	}
	if err := p.Calendar.UnmarshalText([]byte(w.Calendar)); err != nil {
		return p, sluice.Invalid(field("calendar"), "%v", err)
	}
	if err := p.FailMode.UnmarshalText([]byte(w.FailMode)); err != nil {
		return p, sluice.Invalid(field("failMode"), "%v", err)
	}
	if err := p.Scope.UnmarshalText([]byte(w.Scope)); err != nil {
		return p, sluice.Invalid(field("scope"), "must be global or regional, got %q", w.Scope)
	}
	for _, d := range []struct {
		name string
		d    *Duration
		dst  *time.Duration
	}{{"window", w.Window, &p.Window}, {"leaseTTL", w.LeaseTTL, &p.LeaseTTL}} {
		if err := d.d.Err(); err != nil {
			return p, sluice.Invalid(field(d.name), "%v", err)
		}
		*d.dst = d.d.value()
	}
	if w.Burst != nil {
		if *w.Burst < 1 {
			// Zero would silently mean "burst = limit".
			return p, sluice.Invalid(field("burst"), "must be at least 1 (omit it for a burst equal to the limit), got %d", *w.Burst)
		}
		p.Burst = *w.Burst
	}
	if w.Penalty != nil {
		if err := w.Penalty.Base.Err(); err != nil {
			return p, sluice.Invalid(field("penalty.base"), "%v", err)
		}
		if err := w.Penalty.Max.Err(); err != nil {
			return p, sluice.Invalid(field("penalty.max"), "%v", err)
		}
		p.Penalty = sluice.Penalty{After: w.Penalty.After, Base: w.Penalty.Base.value(), Max: w.Penalty.Max.value()}
		if p.Penalty.After < 1 {
			// Zero would silently mean "no penalty".
			return p, sluice.Invalid(field("penalty.after"), "must be at least 1 (omit penalty to leave it off), got %d", p.Penalty.After)
		}
	}
	return p, nil
}

// FromRequest returns req as the body of POST /v1/check, with its
// policies inline. Text that JSON cannot carry as it is (invalid UTF-8,
// which encoding/json would silently turn into U+FFFD and so make two keys
// one) is refused, naming the field.
func FromRequest(req sluice.Request) (CheckRequest, error) {
	if !utf8.ValidString(req.Tenant) {
		return CheckRequest{}, sluice.Invalid("tenant", "is not valid UTF-8")
	}
	hits := req.Hits
	in := CheckRequest{Tenant: req.Tenant, Hits: &hits, Checks: make([]Check, len(req.Checks))}
	for i, c := range req.Checks {
		if c.Space == sluice.SpaceInternal {
			// The server's internal key space is its own: no request
			// reaches it.
			return CheckRequest{}, sluice.Invalid(fmt.Sprintf("checks[%d]", i), "is internal to Sluice and cannot be sent to a server")
		}
		if c.Burn {
			// No request carries it: the server's API counts all or
			// nothing, and dropping it would count otherwise unsaid.
			return CheckRequest{}, sluice.Invalid(fmt.Sprintf("checks[%d].burn", i), "is decided in process only and cannot be sent to a server")
		}
		if !utf8.ValidString(c.Key) {
			return CheckRequest{}, sluice.Invalid(fmt.Sprintf("checks[%d].key", i), "is not valid UTF-8")
		}
		in.Checks[i] = Check{Key: c.Key, Policy: FromPolicy(c.Policy)}
	}
	return in, nil
}

// Decision is one policy's decision on the wire.
type Decision struct {
	Policy    string `json:"policy"`
	Allowed   bool   `json:"allowed"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	// ResetAt is in epoch seconds, rounded up: never before the real reset.
	ResetAt int64 `json:"resetAt"`
	// RetryAfter is in whole seconds, rounded up, as the header.
	RetryAfter   int64  `json:"retryAfter"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	Lease        *Lease `json:"lease,omitempty"`
	Shadowed     bool   `json:"shadowed,omitempty"`
	FailedOpen   bool   `json:"failedOpen,omitempty"`
	FailedClosed bool   `json:"failedClosed,omitempty"`
}

// Lease is a concurrency lease on the wire.
type Lease struct {
	// Token names the lease in renew and release calls.
	Token string `json:"token,omitempty"`
	// ID is a decimal string: JSON numbers lose precision past 2^53.
	ID          string `json:"id"`
	ExpiresAtMs int64  `json:"expiresAtMs"`
}

// CheckResponse is the body of a decision: the reported decision's fields
// at the top (seed 003's limit, resetAt), then one entry per check.
type CheckResponse struct {
	Allowed bool `json:"allowed"`
	Decision
	Error     string     `json:"error,omitempty"`
	Message   string     `json:"message,omitempty"`
	Violated  []string   `json:"violated-policies,omitempty"`
	Decisions []Decision `json:"decisions"`
}

// FromDecision returns d on the wire.
func FromDecision(d sluice.Decision) Decision {
	j := Decision{
		Policy:       d.Policy,
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		ResetAt:      CeilUnix(d.ResetAt),
		RetryAfter:   CeilSeconds(d.RetryAfter),
		RetryAfterMs: CeilMillis(d.RetryAfter),
		Shadowed:     d.Shadowed,
		FailedOpen:   d.FailedOpen,
		FailedClosed: d.FailedClosed,
	}
	if d.Lease.ID != 0 {
		j.Lease = &Lease{ID: strconv.FormatUint(d.Lease.ID, 10), ExpiresAtMs: d.Lease.ExpiresAt.UnixMilli()}
	}
	return j
}

// Decode returns the decision j describes, to the precision of the wire:
// ResetAt to the second (rounded up), RetryAfter to the millisecond.
func (j Decision) Decode() sluice.Decision {
	d := sluice.Decision{
		Policy: j.Policy, Allowed: j.Allowed, Limit: j.Limit, Remaining: j.Remaining,
		ResetAt:    time.Unix(j.ResetAt, 0).UTC(),
		RetryAfter: time.Duration(j.RetryAfterMs) * time.Millisecond,
		Shadowed:   j.Shadowed, FailedOpen: j.FailedOpen, FailedClosed: j.FailedClosed,
	}
	if j.Lease != nil {
		d.Lease.ID, _ = strconv.ParseUint(j.Lease.ID, 10, 64)
		d.Lease.ExpiresAt = time.UnixMilli(j.Lease.ExpiresAtMs).UTC()
	}
	return d
}

// FromResult returns res as the body of its answer.
func FromResult(res sluice.Result) CheckResponse {
	out := CheckResponse{Allowed: res.Allowed, Decision: FromDecision(res.Decision), Decisions: make([]Decision, len(res.Decisions))}
	for i, d := range res.Decisions {
		out.Decisions[i] = FromDecision(d)
	}
	if !res.Allowed {
		out.Error, out.Message, out.Violated = tooManyError, tooManyMessage(res), violated(res)
	}
	return out
}

// Seed 003's denial: its error, its message, and the policies violated.
const tooManyError = "Rate limit exceeded"

func tooManyMessage(res sluice.Result) string {
	return fmt.Sprintf("Too many requests. Please try again in %d seconds.", CeilSeconds(res.Decision.RetryAfter))
}

// violated returns the policies that denied res, sorted, once each.
func violated(res sluice.Result) []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range res.Decisions {
		if !d.Allowed && !seen[d.Policy] {
			out = append(out, d.Policy)
			seen[d.Policy] = true
		}
	}
	sort.Strings(out)
	return out
}

// TooMany is seed 003's body of a 429 from a service a limiter protects
// (httplimit's middleware): the reported decision's limit and reset, and
// the policies violated.
type TooMany struct {
	Error    string   `json:"error"`
	Message  string   `json:"message"`
	Limit    int64    `json:"limit"`
	ResetAt  int64    `json:"resetAt"`
	Violated []string `json:"violated-policies"`
}

// WriteTooMany writes a denial of res as a 429 with its TooMany body. The
// headers must be written first (WriteRateLimitHeaders).
func WriteTooMany(w http.ResponseWriter, res sluice.Result) {
	WriteJSON(w, http.StatusTooManyRequests, TooMany{Error: tooManyError, Message: tooManyMessage(res),
		Limit: res.Decision.Limit, ResetAt: CeilUnix(res.Decision.ResetAt), Violated: violated(res)})
}

// Decode returns the result r describes. The reported decision's own
// "allowed" is the top level's (the embedded field is shadowed on the
// wire): a request is allowed exactly when its reported decision is.
func (r CheckResponse) Decode() sluice.Result {
	res := sluice.Result{Allowed: r.Allowed, Decision: r.Decision.Decode(), Decisions: make([]sluice.Decision, len(r.Decisions))}
	res.Decision.Allowed = r.Allowed
	for i, d := range r.Decisions {
		res.Decisions[i] = d.Decode()
	}
	return res
}

// CeilSeconds returns d in whole seconds, rounded up: 0 for d <= 0, and
// at most sluice.MaxRetryAfter's seconds (a longer d saturates, never
// overflows).
func CeilSeconds(d time.Duration) int64 { return ceil(d, time.Second) }

// CeilMillis returns d in milliseconds as CeilSeconds does in seconds.
func CeilMillis(d time.Duration) int64 { return ceil(d, time.Millisecond) }

// ceil returns d in units, rounded up, between 0 and
// sluice.MaxRetryAfter's units.
func ceil(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	d = min(d, sluice.MaxRetryAfter)
	return int64((d + unit - 1) / unit)
}

// CeilUnix returns t in epoch seconds, rounded up: a reset announced at
// second s has happened by s.
func CeilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// LeaseRequest is the body of the lease routes (POST /v1/leases, and a
// lease's renew and release): the tenant (a tenant's key may omit it), the
// policy (a configured policy's name as a JSON string, or an inline policy
// as an object), the key (a configured policy's key parts, or an inline
// one's KeyValue), and the units (absent means 1).
type LeaseRequest struct {
	Tenant   string            `json:"tenant,omitempty"`
	Policy   json.RawMessage   `json:"policy"`
	Key      map[string]string `json:"key,omitempty"`
	KeyValue string            `json:"keyValue,omitempty"`
	Units    *int64            `json:"units,omitempty"`
}
