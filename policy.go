package sluice

import (
	"fmt"
	"time"
)

// Algorithm selects how a policy counts.
type Algorithm uint8

// The algorithms. The zero Algorithm is invalid so that a forgotten field is
// caught by Validate.
const (
	// FixedWindow counts hits in windows aligned to multiples of Window
	// since the Unix epoch; the count resets at each window's end. Cheap and
	// exact within a window, but up to twice Limit can pass across a
	// boundary.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow weighs the previous aligned window's count by how much
	// of it still overlaps the trailing Window. It never admits more than
	// Limit within one aligned window nor more than twice Limit in any
	// interval of length Window; see algo.SlidingWindow for the bound.
	SlidingWindow
	// SlidingLog keeps the time of every admitted hit and is exact over any
	// trailing Window. Its state grows with Limit, so Limit is at most
	// MaxLogLimit.
	SlidingLog
	// TokenBucket is a token bucket refilled at Limit tokens per Window up
	// to Burst tokens, computed as GCRA with one number per key.
	TokenBucket
	// Concurrency holds up to Limit units in leases. A lease returns its
	// units when released or when LeaseTTL passes without a renewal.
	Concurrency
	// Quota counts long periods (hours to months) in Buckets buckets of
	// Window/Buckets each, or in calendar months (Calendar), with storage
	// bounded by the number of buckets whatever the traffic.
	Quota

	// PenaltyBox is not for policies: it is the engine's record of a key's
	// offences under a policy with a Penalty, kept in the store beside the
	// policy's own counter. Validate refuses it.
	PenaltyBox
)

var algorithmNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	TokenBucket:   "token_bucket",
	Concurrency:   "concurrency",
	Quota:         "quota",
	PenaltyBox:    "penalty_box",
}

// Algorithms lists every valid algorithm.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingLog, TokenBucket, Concurrency, Quota}

func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is an algorithm a store may hold state of:
// one of Algorithms, or PenaltyBox.
func (a Algorithm) Valid() bool { return a >= FixedWindow && a <= PenaltyBox }

// MarshalText encodes the algorithm by name.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("sluice: invalid algorithm %d", uint8(a))
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText accepts an algorithm's name, and "gcra" for TokenBucket.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// ParseAlgorithm returns the algorithm of the given name.
func ParseAlgorithm(name string) (Algorithm, error) {
	if name == "gcra" {
		return TokenBucket, nil
	}
	for _, a := range Algorithms {
		if algorithmNames[a] == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%q is not an algorithm (want one of fixed_window, sliding_window, sliding_log, token_bucket, concurrency, quota)", name)
}

// Calendar aligns a Quota policy to calendar periods instead of a rolling
// Window.
type Calendar uint8

const (
	// Rolling counts the trailing Window in Buckets buckets.
	Rolling Calendar = iota
	// Month counts calendar months in UTC: the quota resets at 00:00 UTC on
	// the first day of each month. Window and Buckets are ignored.
	Month
)

func (c Calendar) String() string {
	switch c {
	case Rolling:
		return ""
	case Month:
		return "month"
	}
	return fmt.Sprintf("Calendar(%d)", uint8(c))
}

// MarshalText encodes the calendar by name ("" or "month").
func (c Calendar) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText accepts "" (rolling) and "month".
func (c *Calendar) UnmarshalText(b []byte) error {
	switch string(b) {
	case "", "rolling":
		*c = Rolling
	case "month":
		*c = Month
	default:
		return fmt.Errorf("%q is not a calendar (want \"month\" or empty)", b)
	}
	return nil
}

// Bounds on policy parameters. They keep every computation on int64
// nanoseconds free of overflow and every key's state bounded.
const (
	MaxLimit        = 1_000_000_000
	MaxLogLimit     = 1_000
	MinWindow       = time.Millisecond
	MaxWindow       = 366 * 24 * time.Hour
	MaxBuckets      = 100
	DefaultLeaseTTL = time.Minute
	// MaxLeases caps the live leases of one concurrency counter, whose
	// state holds one entry each: a limit past it is reached with leases
	// of several units (as the gateway's nodes hold one lease each, sized
	// to their connections). An acquire past it is denied until one ends.
	MaxLeases = 1_000

	// maxBucketDepth bounds a token bucket's depth in time, Burst
	// emission intervals, far from overflowing int64 nanoseconds.
	maxBucketDepth = 4 * MaxWindow

	// MaxRetryAfter is the longest wait an answer names, in Retry-After
	// and retryAfterMs: the longest any policy can make a key wait (a
	// token bucket's depth; a window or a penalty's block is at most
	// MaxWindow). A longer estimate, such as an upstream's for a request
	// that cannot go until the upstream's rate changes, is answered as
	// MaxRetryAfter.
	MaxRetryAfter = maxBucketDepth
)

// Policy says how much may be spent. The zero values of the optional fields
// are useful: Burst defaults to Limit, LeaseTTL to DefaultLeaseTTL, Buckets to
// DefaultBuckets(Window).
type Policy struct {
	// Name identifies the policy in decisions and headers, and scopes its
	// counters: two policies with different names never share a counter.
	// See ValidPolicyName.
	Name      string
	Algorithm Algorithm
	// Limit is the number of hits per Window; for TokenBucket, the refill
	// rate is Limit per Window; for Concurrency, the number of units held at
	// once.
	Limit int64
	// Window is the period of the window algorithms and of Quota, and the
	// refill period of TokenBucket. Concurrency ignores it.
	Window time.Duration
	// Burst is TokenBucket's capacity: how many hits a full bucket admits at
	// once. Zero means Limit.
	Burst int64
	// LeaseTTL is how long a Concurrency lease lives without a renewal.
	LeaseTTL time.Duration
	// Buckets is the number of buckets a rolling Quota keeps; Window must
	// divide evenly into them.
	Buckets int
	// Calendar aligns a Quota to calendar months.
	Calendar Calendar

	// Shadow decides and counts but never denies: a denial is reported
	// with Decision.Shadowed and the request goes through. For trying a
	// policy on live traffic before enforcing it.
	Shadow bool
	// FailMode says what a decision is when the store cannot answer in
	// time: FailOpen (the default) admits, FailClosed denies.
	FailMode FailMode
	// Penalty, if set, blocks a key that keeps being denied.
	Penalty Penalty
	// Scope, on a store in several regions (DynamoDB global tables), is
	// whether Limit holds across all regions (ScopeGlobal, the default)
	// or in each region alone (ScopeRegional). One region's stores ignore
	// it.
	Scope Scope
	// Leased, for a fixed or sliding window on a store shared by many
	// nodes (DynamoDB), lets each node take a batch of the window's hits
	// sized to its recent rate and admit from it locally: far fewer
	// writes, never more than Limit admitted in a window (for a sliding
	// window, never past Limit by its own estimate), and at most the
	// batches left unused by the nodes at a window's end not admitted.
	// Single-node stores ignore it.
	Leased bool
}

// Scope is where a policy's limit holds when its store spans regions.
type Scope uint8

const (
	// ScopeGlobal: one limit for all regions together.
	ScopeGlobal Scope = iota
	// ScopeRegional: the limit holds in each region apart.
	ScopeRegional
)

func (s Scope) String() string {
	if s == ScopeRegional {
		return "regional"
	}
	return "global"
}

// MarshalText encodes the scope as "global" or "regional".
func (s Scope) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes "global" or "regional".
func (s *Scope) UnmarshalText(b []byte) error {
	switch string(b) {
	case "global", "":
		*s = ScopeGlobal
	case "regional":
		*s = ScopeRegional
	default:
		return Invalid("scope", "must be global or regional, got %q", b)
	}
	return nil
}

// FailMode is what a policy decides when its store fails.
type FailMode uint8

const (
	// FailOpen admits when the store cannot answer: availability over
	// exact limits (seed 003's choice).
	FailOpen FailMode = iota
	// FailClosed denies when the store cannot answer.
	FailClosed
)

func (m FailMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// MarshalText encodes the mode as "open" or "closed".
func (m FailMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText accepts "open" (or "") and "closed".
func (m *FailMode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "", "open":
		*m = FailOpen
	case "closed":
		*m = FailClosed
	default:
		return fmt.Errorf("%q is not a fail mode (want \"open\" or \"closed\")", b)
	}
	return nil
}

// Penalty blocks repeat offenders: a key denied After times in a row is
// blocked for Base, then twice as long at each further offence, up to Max.
// The zero Penalty is off; one that is on needs all three (none has a
// default).
type Penalty struct {
	After int           `json:"after,omitempty" yaml:"after"`
	Base  time.Duration `json:"base,omitempty" yaml:"base"`
	Max   time.Duration `json:"max,omitempty" yaml:"max"`
}

// Enabled reports whether the penalty is on.
func (p Penalty) Enabled() bool { return p.After > 0 }

// ValidPolicyName reports whether name can name a policy: 1 to 128
// letters, digits, '.', '_', ':', '/' or '-'. Names appear in headers (as
// Structured Field strings) and in store keys, so they are kept plain.
// Every decision checks its policies' names: a loop, not a regexp, which
// cost a few percent of a decision's CPU.
func ValidPolicyName(name string) bool {
	if len(name) < 1 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '/' || c == '-':
		default:
			return false
		}
	}
	return true
}

// EffectiveBurst returns Burst, or Limit if Burst is zero.
func (p *Policy) EffectiveBurst() int64 {
	if p.Burst == 0 {
		return p.Limit
	}
	return p.Burst
}

// Capacity returns the most hits one request can be admitted: a token
// bucket's burst, every other policy's limit.
func (p *Policy) Capacity() int64 {
	if p.Algorithm == TokenBucket {
		return p.EffectiveBurst()
	}
	return p.Limit
}

// EffectiveLeaseTTL returns LeaseTTL, or DefaultLeaseTTL if it is zero.
func (p *Policy) EffectiveLeaseTTL() time.Duration {
	if p.LeaseTTL == 0 {
		return DefaultLeaseTTL
	}
	return p.LeaseTTL
}

// EffectiveBuckets returns Buckets, or DefaultBuckets(Window) if it is zero.
func (p *Policy) EffectiveBuckets() int {
	if p.Buckets == 0 {
		return DefaultBuckets(p.Window)
	}
	return p.Buckets
}

// DefaultBuckets picks a bucket count for a rolling quota: 10-minute buckets
// for an hour (6), hourly for a day (24), daily for longer windows, and 10
// otherwise, each only if it divides the window evenly.
func DefaultBuckets(window time.Duration) int {
	for _, size := range []time.Duration{24 * time.Hour, time.Hour, 10 * time.Minute} {
		if window > size && window%size == 0 && window/size <= MaxBuckets {
			return int(window / size)
		}
	}
	if window%10 == 0 {
		return 10
	}
	return 1
}

// Validate reports the first parameter out of bounds as a KindInvalid
// *Error naming the field.
func (p *Policy) Validate() error {
	if !ValidPolicyName(p.Name) {
		return Invalid("name", "must be 1 to 128 letters, digits, '.', '_', ':', '/' or '-'")
	}
	if !p.Algorithm.Valid() || p.Algorithm == PenaltyBox {
		return Invalid("algorithm", "is missing or unknown")
	}
	limitMax := int64(MaxLimit)
	if p.Algorithm == SlidingLog {
		limitMax = MaxLogLimit
	}
	if p.Limit <= 0 || p.Limit > limitMax {
		return Invalid("limit", "must be between 1 and %d for %s, got %d", limitMax, p.Algorithm, p.Limit)
	}
	calendar := p.Algorithm == Quota && p.Calendar == Month
	if p.Algorithm != Concurrency && !calendar {
		if p.Window < MinWindow || p.Window > MaxWindow {
			return Invalid("window", "must be between %v and %v, got %v", MinWindow, MaxWindow, p.Window)
		}
	}
	if p.Leased && p.Algorithm != FixedWindow && p.Algorithm != SlidingWindow {
		return Invalid("leased", "applies to fixed_window and sliding_window policies only, got %s", p.Algorithm)
	}
	if p.Calendar != Rolling && p.Algorithm != Quota {
		return Invalid("calendar", "applies to quota policies only")
	}
	if p.FailMode > FailClosed {
		return Invalid("failMode", "is unknown")
	}
	if p.Scope > ScopeRegional {
		return Invalid("scope", "is unknown")
	}
	if p.Penalty.Enabled() {
		// No default block: a missing one is named as missing, not as 0s.
		if p.Penalty.Base == 0 {
			return Invalid("penalty.base", "is required: how long the first block lasts, between %v and %v", MinWindow, MaxWindow)
		}
		if p.Penalty.Max == 0 {
			return Invalid("penalty.max", "is required: the longest block, between penalty.base (%v) and %v", p.Penalty.Base, MaxWindow)
		}
		if p.Penalty.Base < MinWindow || p.Penalty.Base > MaxWindow {
			return Invalid("penalty.base", "must be between %v and %v, got %v", MinWindow, MaxWindow, p.Penalty.Base)
		}
		if p.Penalty.Max < p.Penalty.Base || p.Penalty.Max > MaxWindow {
			return Invalid("penalty.max", "must be between penalty.base (%v) and %v, got %v", p.Penalty.Base, MaxWindow, p.Penalty.Max)
		}
	} else if p.Penalty.After < 0 || p.Penalty != (Penalty{}) {
		// A penalty with a time but no count would silently be off.
		return Invalid("penalty.after", "must be at least 1 to turn the penalty on (omit penalty to leave it off), got %d", p.Penalty.After)
	}
	switch p.Algorithm {
	case TokenBucket:
		if p.Burst < 0 || p.Burst > MaxLimit {
			return Invalid("burst", "must be between 0 (meaning limit) and %d, got %d", MaxLimit, p.Burst)
		}
		// The bucket's depth in time, Burst emission intervals, must stay
		// far from overflowing int64 nanoseconds. Bound the operand before
		// the product: a product that overflowed could wrap to anything.
		interval := (p.Window + time.Duration(p.Limit) - 1) / time.Duration(p.Limit)
		if p.EffectiveBurst() > int64(maxBucketDepth/interval) {
			return Invalid("burst", "%d refills of %v each exceed %v", p.EffectiveBurst(), interval, maxBucketDepth)
		}
	case Concurrency:
		if p.LeaseTTL < 0 || p.LeaseTTL > MaxWindow || (p.LeaseTTL > 0 && p.LeaseTTL < MinWindow) {
			return Invalid("leaseTTL", "must be between %v and %v (or 0 for %v), got %v", MinWindow, MaxWindow, DefaultLeaseTTL, p.LeaseTTL)
		}
	case Quota:
		if p.Calendar > Month {
			return Invalid("calendar", "is unknown")
		}
		if calendar {
			break
		}
		b := p.EffectiveBuckets()
		if b < 1 || b > MaxBuckets {
			return Invalid("buckets", "must be between 1 and %d, got %d", MaxBuckets, b)
		}
		if p.Window%time.Duration(b) != 0 || p.Window/time.Duration(b) < MinWindow {
			return Invalid("buckets", "window %v does not divide into %d buckets of at least %v", p.Window, b, MinWindow)
		}
	}
	return nil
}
