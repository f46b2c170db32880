// Package envoyrls is Envoy's rate limit service on Sluice:
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC,
// configured by the YAML files of envoyproxy/ratelimit, unchanged.
//
// A request's domain is a Sluice tenant, "envoy:" and the domain (a name no
// tenant of the HTTP API can have, so the two never share counters). Each
// descriptor is matched against the domain's descriptor tree as
// envoyproxy/ratelimit matches it, and its rule's limits are Sluice
// policies, named after the rule, counting the descriptor's entries.
//
// Unlike envoyproxy/ratelimit, a request is decided all-or-nothing: it is
// admitted only if every descriptor admits it, and a denied request
// consumes nothing, from any descriptor. Options.Counting decides each
// descriptor on its own instead, as envoyproxy/ratelimit does (an admitted
// descriptor consumes even when another denies the request).
package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// Tenant returns the Sluice tenant that counts domain's requests: the
// tenant layer's name for it (tenancy.EnvoyTenant).
func Tenant(domain string) string { return tenancy.EnvoyTenant(domain) }

// Limiter decides requests all-or-nothing: sluice.Limiter's Check, which
// the engine implements.
type Limiter interface {
	Check(ctx context.Context, req sluice.Request) (sluice.Result, error)
}

// Headers names the RateLimit response headers the service adds, as
// envoyproxy/ratelimit's LIMIT_*_HEADER settings do; empty names add none.
type Headers struct {
	Limit, Remaining, Reset string
}

// DefaultHeaders are envoyproxy/ratelimit's header names.
var DefaultHeaders = Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}

// maxHeaderName bounds a header's name: a name, not a payload.
const maxHeaderName = 128

// Validate reports whether h's names are HTTP header names (RFC 9110
// tokens, at most 128 bytes), all three set and different, so that
// nothing but a header's name can be written where Envoy writes one. Its
// errors name the field at fault: limit, remaining or reset.
func (h Headers) Validate() error {
	seen := map[string]string{}
	for _, f := range []struct{ field, name string }{{"limit", h.Limit}, {"remaining", h.Remaining}, {"reset", h.Reset}} {
		switch {
		case f.name == "":
			return sluice.Invalid(f.field, "a header name is required")
		case len(f.name) > maxHeaderName:
			return sluice.Invalid(f.field, "a header name is at most %d bytes", maxHeaderName)
		case strings.IndexFunc(f.name, func(r rune) bool { return !isTokenChar(r) }) >= 0:
			return sluice.Invalid(f.field, "%q is not an HTTP header name: letters, digits and !#$%%&'*+-.^_`|~ only", f.name)
		}
		lower := strings.ToLower(f.name)
		if other, dup := seen[lower]; dup {
			return sluice.Invalid(f.field, "%q is the %s header's name already", f.name, other)
		}
		seen[lower] = f.field
	}
	return nil
}

// isTokenChar reports whether r may be in an HTTP token (RFC 9110 tchar).
func isTokenChar(r rune) bool {
	return r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// Options configures a Service.
type Options struct {
	// Limiter decides; required.
	Limiter Limiter
	// Config returns the configuration in force; required.
	Config func() *Config
	// Counting is how a request's descriptors consume; the zero value is
	// AllOrNothing.
	Counting Counting
	// PerDescriptor is Counting PerDescriptor, when Counting is not set.
	PerDescriptor bool
	// QuotaMode makes every descriptor a quota-mode one, as
	// envoyproxy/ratelimit's QUOTA_MODE=true does (a rule's quota_mode
	// makes its own one): a quota-mode descriptor over its limits denies
	// the request only if every quota-mode descriptor of the request is
	// over too; the others, within theirs, decide it (docs/envoy.md).
	QuotaMode bool
	// ShadowMode answers OK whatever the descriptors say, as
	// envoyproxy/ratelimit's SHADOW_MODE=true does: a dry run. Each
	// descriptor's status is kept, and the counters count as they would
	// enforced (a request enforcement would deny consumes nothing), so
	// that turning it off changes no decision but the overall code.
	ShadowMode bool
	// DynamicMetadata adds to every answer the dynamic metadata
	// envoyproxy/ratelimit adds with RESPONSE_DYNAMIC_METADATA=true: the
	// domain, the descriptors (their entries, and the limit and
	// hits_addend they set), the request's hits_addend, and the metadata
	// of the rules of the descriptors that passed, merged, the first
	// value of a key winning.
	DynamicMetadata bool
	// ReferenceErrors answers errors as envoyproxy/ratelimit does: code
	// Unknown, with its texts for an empty domain or descriptor list, and
	// a store that fails is an Unknown error instead of an answer decided
	// by the limits' fail modes, so that Envoy's failure_mode_deny
	// decides. Other bad requests stay InvalidArgument.
	ReferenceErrors bool
	// Headers, if Limit is set, adds the RateLimit headers of the
	// descriptor nearest its limit to every answer.
	Headers Headers
	// Now is the clock of durations until reset. Default: time.Now.
	Now func() time.Time
	// Hide, if set, returns the pseudonym of the value of a descriptor's
	// entry named name, of tenant (Tenant): the counters' keys, and all
	// that shows them, hold it instead of the value (docs/privacy.md).
	// Rules match the values as sent.
	Hide func(tenant, name, value string) string
}

// Counting is how a request's descriptors consume.
type Counting uint8

const (
	// AllOrNothing admits a request only if every descriptor admits it
	// (but for quota mode), and a denied request consumes nothing.
	AllOrNothing Counting = iota
	// PerDescriptor decides each descriptor on its own, as
	// envoyproxy/ratelimit does: a descriptor within its limits consumes
	// from them even when another denies the request. A descriptor that
	// denies consumes nothing.
	PerDescriptor
	// Reference is envoyproxy/ratelimit's own counting
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false): per descriptor,
	// and a fixed window adds the hits of a descriptor it denies too, so
	// that its counter passes its limit. Until the engine can add denied
	// hits (burns, below), it counts as PerDescriptor.
	Reference
)

var countings = [...]string{AllOrNothing: "all-or-nothing", PerDescriptor: "per-descriptor", Reference: "reference"}

func (c Counting) String() string {
	if int(c) < len(countings) {
		return countings[c]
	}
	return fmt.Sprintf("Counting(%d)", c)
}

// ParseCounting parses a Counting's name: all-or-nothing, per-descriptor
// or reference.
func ParseCounting(s string) (Counting, error) {
	for c, name := range countings {
		if s == name {
			return Counting(c), nil
		}
	}
	return 0, fmt.Errorf("must be all-or-nothing, per-descriptor or reference, got %q", s)
}

// Service implements the RateLimitService.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	opts Options
}

// New returns a Service.
func New(opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Counting == AllOrNothing && opts.PerDescriptor {
		opts.Counting = PerDescriptor
	}
	return &Service{opts: opts}
}

// entry is a descriptor's key and value.
type entry struct{ key, value string }

// target is what one descriptor of a request is checked against.
type target struct {
	rule   *Rule
	limits []Limit // the rule's, or the request's override
	key    string  // the counter's key: the descriptor's entries
	hits   int64
	// quota: the descriptor is in quota mode (Options.QuotaMode, or its
	// rule's quota_mode).
	quota   bool
	refs    []ref
	outcome []sluice.Decision
}

// maxHits bounds a hits_addend: more can never be admitted by any limit.
const maxHits = sluice.MaxHits

// ShouldRateLimit decides a request.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		if s.opts.ReferenceErrors {
			return nil, status.Error(codes.Unknown, "rate limit domain must not be empty")
		}
		return nil, status.Error(codes.InvalidArgument, "domain: must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		if s.opts.ReferenceErrors {
			return nil, status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
		}
		return nil, status.Error(codes.InvalidArgument, "descriptors: must not be empty")
	}
	cfg := s.opts.Config()
	if cfg == nil {
		// None has loaded yet (a watcher started without one): the
		// reference's error, whatever the mode.
		return nil, errNoConfig
	}
	ts := make([]target, len(req.Descriptors))
	replaced := map[string]bool{}
	for i, d := range req.Descriptors {
		t, err := s.resolve(cfg, req, i, d)
		if err != nil {
			return nil, err
		}
		ts[i] = t
		if t.rule != nil {
			for _, name := range t.rule.Replaces {
				replaced[name] = true
			}
		}
	}
	for i := range ts {
		t := &ts[i]
		if r := t.rule; r != nil && r.Name != "" && replaced[r.Name] {
			t.limits = nil // replaced: not evaluated, its counters untouched
		}
		// As the reference: every descriptor but an unlimited one when
		// all are in quota mode; else those whose rule applies and is.
		t.quota = s.opts.QuotaMode && !t.unlimited() || len(t.limits) > 0 && t.rule != nil && t.rule.QuotaMode
	}
	now := s.opts.Now()
	tenant := Tenant(req.Domain)
	if len(tenant) > sluice.MaxTenantLen {
		for i := range ts {
			if len(ts[i].limits) > 0 {
				return nil, status.Errorf(codes.InvalidArgument, "domain: is longer than %d bytes", maxDomainLen)
			}
		}
	}
	out := make([]bool, len(ts))
	if s.opts.Counting != AllOrNothing {
		for i := range ts {
			if err := s.decide(ctx, tenant, ts[i:i+1], out[i:i+1]); err != nil {
				return nil, err
			}
		}
	} else {
		// All-or-nothing, but for quota mode: a quota-mode descriptor
		// over its limits leaves the request, and the others decide it
		// again, as long as one quota-mode descriptor stays within its
		// limits. Each round sets one more aside: at most one round a
		// descriptor.
		for {
			if err := s.decide(ctx, tenant, ts, out); err != nil {
				return nil, err
			}
			if !quotaOver(ts, out) {
				break
			}
		}
	}
	resp := s.answer(ts, now)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, ts, resp.Statuses)
	}
	return resp, nil
}

// unlimited reports whether t's rule is unlimited.
func (t *target) unlimited() bool { return t.rule != nil && t.rule.Unlimited }

// denied reports whether any limit of t denied it.
func (t *target) denied() bool {
	for j := range t.outcome {
		if !t.outcome[j].Allowed {
			return true
		}
	}
	return false
}

// quotaOver sets aside (out) the quota-mode targets a decision of the
// others, not set aside yet, denied, and reports whether to decide again
// without them: only if nothing else denied, and one quota-mode target is
// left within its limits. Otherwise the request is denied, or admitted,
// as decided.
func quotaOver(ts []target, out []bool) bool {
	var denied []int
	left := 0 // quota-mode targets within their limits
	for i := range ts {
		switch t := &ts[i]; {
		case out[i]:
		case !t.denied():
			if t.quota {
				left++
			}
		case !t.quota:
			return false // a descriptor not in quota mode denies the request
		default:
			denied = append(denied, i)
		}
	}
	if len(denied) == 0 || left == 0 {
		return false
	}
	for _, i := range denied {
		out[i] = true
	}
	return true
}

// resolve finds what descriptor d, the i-th of req, is checked against.
func (s *Service) resolve(cfg *Config, req *rlspb.RateLimitRequest, i int, d *ratelimitpb.RateLimitDescriptor) (target, error) {
	var t target
	if d == nil {
		return t, nil
	}
	if d.GetIsNegativeHits() {
		return t, status.Errorf(codes.InvalidArgument, "descriptors[%d].is_negative_hits: refunds are not supported", i)
	}
	t.hits = int64(max(1, req.GetHitsAddend()))
	if h := d.GetHitsAddend(); h != nil {
		t.hits = int64(min(h.GetValue(), maxHits+1))
	}
	entries := make([]entry, len(d.GetEntries()))
	for j, e := range d.GetEntries() {
		entries[j] = entry{e.GetKey(), e.GetValue()}
	}
	var shared []string
	if o := d.GetLimit(); o != nil {
		l, err := override(o)
		if err != nil {
			return t, status.Errorf(codes.InvalidArgument, "descriptors[%d].limit.%v", i, err)
		}
		if !cfg.HasDomain(req.GetDomain()) {
			// As envoyproxy/ratelimit: a domain not configured has no
			// limits, not even a request's own, and is not counted, so
			// that callers cannot make tenants of any name they like.
			return t, nil
		}
		t.limits = []Limit{l}
	} else if cfg != nil {
		t.rule, shared = cfg.match(req.GetDomain(), entries)
		if t.rule != nil && !t.rule.Unlimited {
			t.limits = t.rule.Limits
		}
	}
	if len(t.limits) == 0 {
		return t, nil
	}
	if s.opts.Hide != nil {
		tenant := Tenant(req.GetDomain())
		for j := range entries {
			entries[j].value = s.opts.Hide(tenant, entries[j].key, entries[j].value)
		}
	}
	t.key = counterKey(entries, shared)
	return t, nil
}

// over reports whether hits are over l whatever its state: l is a limit of
// 0, or hits are more than it can ever hold.
func (l *Limit) over(hits int64) bool { return l.Zero || hits > l.Policy.Capacity() }

// override is a limit a request sets on its descriptor: its counters are
// those of its descriptor's entries and its unit.
func override(o *ratelimitpb.RateLimitDescriptor_RateLimitOverride) (Limit, error) {
	unit, ok := overrideUnits[o.GetUnit()]
	if !ok {
		return Limit{}, fmt.Errorf("unit: must be SECOND to YEAR, got %v", o.GetUnit())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		if mult = m.GetValue(); mult == 0 {
			return Limit{}, fmt.Errorf("unit_multiplier: must be at least 1")
		}
	}
	window := time.Duration(mult) * unit.d
	if window > sluice.MaxWindow {
		return Limit{}, fmt.Errorf("unit_multiplier: %d %v is longer than %v", mult, o.GetUnit(), sluice.MaxWindow)
	}
	rpu := o.GetRequestsPerUnit()
	name := unit.name // the common case, without formatting one
	if mult != 1 {
		name = fmt.Sprintf("override.%s.%d", strings.ToLower(unit.unit.String()), mult)
	}
	l := Limit{Proto: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit.unit}}
	l.Policy = sluice.Policy{Name: name, Algorithm: sluice.FixedWindow, Limit: int64(rpu), Window: window}
	if rpu == 0 {
		l.Zero, l.Policy.Limit = true, 1
	}
	if l.Policy.Limit > sluice.MaxLimit {
		return Limit{}, fmt.Errorf("requests_per_unit: must be at most %d, got %d", sluice.MaxLimit, rpu)
	}
	return l, nil
}

// overrideUnit is a unit a request's override may use, with the name of
// its policy for a unit_multiplier of 1: override.<unit>.1.
type overrideUnit struct {
	d    time.Duration
	unit rlspb.RateLimitResponse_RateLimit_Unit
	name string
}

var overrideUnits = func() map[typepb.RateLimitUnit]overrideUnit {
	m := map[typepb.RateLimitUnit]overrideUnit{}
	for u, name := range map[typepb.RateLimitUnit]string{
		typepb.RateLimitUnit_SECOND: "second",
		typepb.RateLimitUnit_MINUTE: "minute",
		typepb.RateLimitUnit_HOUR:   "hour",
		typepb.RateLimitUnit_DAY:    "day",
		typepb.RateLimitUnit_MONTH:  "month",
		typepb.RateLimitUnit_YEAR:   "year",
	} {
		m[u] = overrideUnit{units[name].d, units[name].unit, "override." + name + ".1"}
	}
	return m
}()

// counterKey is the key of a descriptor's counters: its entries, each
// key=value escaped as in a URL's query, joined by '&', with a
// share_threshold entry's pattern in place of its value. One too long for
// a Sluice key is its SHA-256.
func counterKey(entries []entry, shared []string) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('&')
		}
		v := e.value
		if shared != nil && shared[i] != "" {
			v = shared[i]
		}
		b.WriteString(url.QueryEscape(e.key))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(v))
	}
	if b.Len() > sluice.MaxKeyLen {
		sum := sha256.Sum256([]byte(b.String()))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// decide asks the limiter about targets ts, but those set aside (out),
// whose outcome stays, all-or-nothing: one request
// of every limit of every descriptor that adds hits, unless one of them is
// over a limit already, and one request reading the others' state. Only
// the limits left to ts count: a replaced rule's limits, a 0 included, are
// gone by then.
func (s *Service) decide(ctx context.Context, tenant string, ts []target, out []bool) error {
	over := false
	for i := range ts {
		if out[i] {
			continue
		}
		for j := range ts[i].limits {
			if l := &ts[i].limits[j]; !l.Policy.Shadow && l.over(ts[i].hits) && !s.burns(l) {
				over = true
			}
		}
	}
	consume := sluice.Request{Tenant: tenant, Hits: 1}
	read := sluice.Request{Tenant: tenant}
	for i := range ts {
		if out[i] {
			continue
		}
		t := &ts[i]
		t.refs = make([]ref, len(t.limits))
		for j, l := range t.limits {
			c := s.check(&l, t.key, t.hits)
			switch {
			case l.over(t.hits) && !s.burns(&l):
				t.refs[j] = ref{kind: overLimit}
			case over || t.hits == 0:
				c.Hits = 0
				t.refs[j] = ref{kind: reading, i: len(read.Checks)}
				read.Checks = append(read.Checks, c)
			default:
				t.refs[j] = ref{kind: consuming, i: len(consume.Checks)}
				consume.Checks = append(consume.Checks, c)
			}
		}
	}
	if len(consume.Checks) > sluice.MaxChecks || len(read.Checks) > sluice.MaxChecks {
		return status.Errorf(codes.InvalidArgument, "descriptors: at most %d limits can be checked in one request", sluice.MaxChecks)
	}
	var cres, rres sluice.Result
	var err error
	if len(consume.Checks) > 0 {
		if cres, err = s.opts.Limiter.Check(ctx, consume); err != nil {
			return s.limiterError(err)
		}
		if err := s.storeFailed(cres); err != nil {
			return err
		}
	}
	if len(read.Checks) > 0 {
		if rres, err = s.opts.Limiter.Check(ctx, read); err != nil {
			return s.limiterError(err)
		}
		if err := s.storeFailed(rres); err != nil {
			return err
		}
	}
	for i := range ts {
		if out[i] {
			continue
		}
		t := &ts[i]
		t.outcome = make([]sluice.Decision, len(t.limits))
		for j, r := range t.refs {
			switch r.kind {
			case overLimit:
				shadow := t.limits[j].Policy.Shadow
				t.outcome[j] = sluice.Decision{Allowed: shadow, Shadowed: shadow}
			case reading:
				// What the limit would have answered: a read consumes
				// nothing, and says whether the hits would fit.
				d := rres.Decisions[r.i]
				if !d.Shadowed {
					d.Allowed = d.Allowed && d.Remaining >= t.hits
				}
				t.outcome[j] = d
			case consuming:
				t.outcome[j] = cres.Decisions[r.i]
			}
		}
	}
	return nil
}

// burns reports whether limit l's check adds its hits to its counter even
// when it denies (sluice.Check.Burn), as envoyproxy/ratelimit's INCRBY
// does with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: under Reference
// counting, for the limits that can burn (algo.Burnable: the reference's
// units are fixed windows; a rule of another Sluice algorithm counts as
// PerDescriptor). The counter may then pass its limit, and answers
// OVER_LIMIT while it is over. A limit of 0 is over without asking.
func (s *Service) burns(l *Limit) bool {
	return s.opts.Counting == Reference && !l.Zero && algo.Burnable(&l.Policy)
}

// check is limit l's check of the counter key, for hits.
func (s *Service) check(l *Limit, key string, hits int64) sluice.Check {
	return sluice.Check{Policy: l.Policy, Key: key, Hits: hits, Burn: s.burns(l)}
}

// ref is where a limit's decision comes from.
type ref struct {
	kind refKind
	i    int // the check's index in its request
}

type refKind uint8

const (
	overLimit refKind = iota // over the limit without asking: a limit of 0, or more hits than it holds
	reading                  // read: the request is over a limit already, or adds no hits
	consuming                // decided, consuming if the request is admitted
)

// errNoConfig answers a call before any configuration has loaded, in the
// reference's words.
var errNoConfig = status.Error(codes.Unknown, "no rate limit configuration loaded")

// errStoreFailed answers, with ReferenceErrors, a call whose store failed.
var errStoreFailed = status.Error(codes.Unknown, "the rate limit store failed; no decision")

// storeFailed is, with ReferenceErrors, the error of a result the store
// failed to decide (the fail modes did): errStoreFailed. Otherwise nil:
// the fail modes' answer stands.
func (s *Service) storeFailed(res sluice.Result) error {
	if !s.opts.ReferenceErrors {
		return nil
	}
	for i := range res.Decisions {
		if d := &res.Decisions[i]; d.FailedOpen || d.FailedClosed {
			return errStoreFailed
		}
	}
	return nil
}

// limiterError is the gRPC status of the limiter's error, by wire's one
// table of kinds: bad input is the caller's (InvalidArgument), a store that
// failed unavailable (Unknown, errStoreFailed, with ReferenceErrors); an
// internal error's text is never shown.
func (s *Service) limiterError(err error) error {
	k := sluice.KindOf(err)
	switch {
	case k == sluice.KindInvalid:
	case s.opts.ReferenceErrors:
		return errStoreFailed
	case k != sluice.KindUnavailable:
		err = &sluice.Error{Kind: sluice.KindUnavailable, Message: "the limiter is unavailable; try again", Err: err}
	}
	return grpcStatus(err)
}

// grpcStatus returns err as a gRPC status error: its kind's code (wire's
// one table of kinds), and the message an HTTP answer of it carries
// (wire.ErrorOf: the field at fault and the innermost Sluice message,
// never an internal error's text).
func grpcStatus(err error) error {
	return status.Error(codes.Code(wire.GRPCCode(sluice.KindOf(err))), wire.ErrorOf(err).Message)
}

// answer makes the response of decided targets.
func (s *Service) answer(ts []target, now time.Time) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(ts))}
	var nearest *rlspb.RateLimitResponse_DescriptorStatus
	// As the reference: over if a descriptor not in quota mode is over,
	// or every one in quota mode is.
	quotas, quotasOver := 0, 0
	for i := range ts {
		st := status1(&ts[i], now)
		resp.Statuses[i] = st
		isOver := st.Code == rlspb.RateLimitResponse_OVER_LIMIT
		if ts[i].quota {
			quotas++
			if isOver {
				quotasOver++
			}
		} else if isOver {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if st.CurrentLimit != nil && (nearest == nil || st.Code == rlspb.RateLimitResponse_OVER_LIMIT ||
			nearest.Code != rlspb.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < nearest.LimitRemaining) {
			nearest = st
		}
	}
	if quotas > 0 && quotasOver == quotas {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.ShadowMode {
		resp.OverallCode = rlspb.RateLimitResponse_OK
	}
	if h := s.opts.Headers; h.Limit != "" && nearest != nil {
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: h.Limit, Value: strconv.FormatUint(uint64(nearest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: h.Remaining, Value: strconv.FormatUint(uint64(nearest.LimitRemaining), 10)},
			{Key: h.Reset, Value: strconv.FormatInt(nearest.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	return resp
}

// dynamicMetadata is the dynamic metadata of req's answer, whose
// descriptors ts have statuses sts, as envoyproxy/ratelimit builds it.
// The rules' metadata is copied, never shared with the configuration.
func dynamicMetadata(req *rlspb.RateLimitRequest, ts []target, sts []*rlspb.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	ds := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, len(d.Entries))
		for i, e := range d.Entries {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if d.Limit != nil {
			f["limit"] = structpb.NewStringValue(d.Limit.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: ds}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range ts {
		t := &ts[i]
		// A rule that applied (not replaced, not unlimited) to a
		// descriptor that passed.
		if t.rule != nil && t.rule.Metadata != nil && len(t.limits) > 0 && sts[i].Code != rlspb.RateLimitResponse_OVER_LIMIT {
			mergeMetadata(passed, t.rule.Metadata)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's fields to dst, a copy made here: a field dst
// has already keeps its value, but for two structures, merged likewise.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
			continue
		}
		if hs, vs := have.GetStructValue(), v.GetStructValue(); hs != nil && vs != nil {
			mergeMetadata(hs, vs)
		}
	}
}

// status1 is the status of one descriptor: over the limit if any of its
// limits denied (that limit's), else within them (the limit with the
// least left).
func status1(t *target, now time.Time) *rlspb.RateLimitResponse_DescriptorStatus {
	switch {
	case t.rule != nil && t.rule.Unlimited:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	case len(t.limits) == 0:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	pick := -1
	for j := range t.limits {
		d := &t.outcome[j]
		switch {
		case pick < 0:
			pick = j
		case !d.Allowed && t.outcome[pick].Allowed:
			pick = j
		case d.Allowed == t.outcome[pick].Allowed && d.Remaining < t.outcome[pick].Remaining:
			pick = j
		}
	}
	d, l := &t.outcome[pick], &t.limits[pick]
	st := &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               rlspb.RateLimitResponse_OK,
		CurrentLimit:       l.Proto,
		LimitRemaining:     uint32(min(max(d.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: untilReset(d, l, now),
	}
	if !d.Allowed {
		st.Code, st.LimitRemaining = rlspb.RateLimitResponse_OVER_LIMIT, 0
	}
	return st
}

// untilReset is how long until d's limit resets, in whole seconds rounded
// up. A fixed window (a limit of 0 too) resets at the end of the window,
// aligned to the Unix epoch, as envoyproxy/ratelimit reports it, whether or
// not anything was counted in it (a limit read, not consumed, has nothing
// used yet); other algorithms when nothing is used any more.
func untilReset(d *sluice.Decision, l *Limit, now time.Time) *durationpb.Duration {
	reset := d.ResetAt
	if l.Zero || l.Policy.Algorithm == sluice.FixedWindow || reset.IsZero() {
		w := int64(l.Policy.Window)
		n := now.UnixNano()
		end := time.Unix(0, n-n%w+w)
		if end.After(reset) {
			reset = end
		}
	}
	left := reset.Sub(now)
	return &durationpb.Duration{Seconds: int64((max(left, 0) + time.Second - 1) / time.Second)}
}
