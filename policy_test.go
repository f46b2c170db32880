package sluice

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPolicyValidate: each parameter out of bounds is refused, naming its
// field; the bounds themselves are accepted.
func TestPolicyValidate(t *testing.T) {
	valid := Policy{Name: "p", Algorithm: FixedWindow, Limit: 10, Window: time.Minute}
	for _, tc := range []struct {
		name  string
		edit  func(p *Policy)
		field string // "" for valid
	}{
		{"valid", func(p *Policy) {}, ""},
		{"max limit", func(p *Policy) { p.Limit = MaxLimit }, ""},
		{"max window", func(p *Policy) { p.Window = MaxWindow }, ""},
		{"min window", func(p *Policy) { p.Window = MinWindow }, ""},
		{"no name", func(p *Policy) { p.Name = "" }, "name"},
		{"name with a space", func(p *Policy) { p.Name = "a b" }, "name"},
		{"name of 129 bytes", func(p *Policy) { p.Name = strings.Repeat("a", 129) }, "name"},
		{"no algorithm", func(p *Policy) { p.Algorithm = 0 }, "algorithm"},
		{"penalty box is internal", func(p *Policy) { p.Algorithm = PenaltyBox }, "algorithm"},
		{"zero limit", func(p *Policy) { p.Limit = 0 }, "limit"},
		{"limit past max", func(p *Policy) { p.Limit = MaxLimit + 1 }, "limit"},
		{"window under min", func(p *Policy) { p.Window = MinWindow - 1 }, "window"},
		{"window past max", func(p *Policy) { p.Window = MaxWindow + 1 }, "window"},
		{"log limit", func(p *Policy) { p.Algorithm, p.Limit = SlidingLog, MaxLogLimit+1 }, "limit"},
		{"leased fixed", func(p *Policy) { p.Algorithm, p.Leased = FixedWindow, true }, ""},
		{"leased sliding", func(p *Policy) { p.Algorithm, p.Leased = SlidingWindow, true }, ""},
		{"leased token bucket", func(p *Policy) { p.Algorithm, p.Leased = TokenBucket, true }, "leased"},
		{"leased sliding log", func(p *Policy) { p.Algorithm, p.Leased = SlidingLog, true }, "leased"},
		{"calendar on a window", func(p *Policy) { p.Calendar = Month }, "calendar"},
		{"unknown fail mode", func(p *Policy) { p.FailMode = 7 }, "failMode"},
		{"negative burst", func(p *Policy) { p.Algorithm, p.Burst = TokenBucket, -1 }, "burst"},
		{"burst past max", func(p *Policy) { p.Algorithm, p.Burst = TokenBucket, MaxLimit+1 }, "burst"},
		{"deepest bucket", func(p *Policy) {
			p.Algorithm, p.Limit, p.Window, p.Burst = TokenBucket, 1, time.Second, int64(maxBucketDepth/time.Second)
		}, ""},
		{"bucket one refill too deep", func(p *Policy) {
			p.Algorithm, p.Limit, p.Window, p.Burst = TokenBucket, 1, time.Second, int64(maxBucketDepth/time.Second)+1
		}, "burst"},
		// The product 18446744074 ns * 1e9 wraps int64 nanoseconds to a
		// small positive number: it must be refused, not wrapped.
		{"bucket depth that wraps", func(p *Policy) {
			p.Algorithm, p.Limit, p.Window, p.Burst = TokenBucket, 1, 18446744074*time.Nanosecond, 1_000_000_000
		}, "burst"},
		{"penalty base under min", func(p *Policy) { p.Penalty = Penalty{After: 1, Base: 0, Max: time.Second} }, "penalty.base"},
		{"penalty max under base", func(p *Policy) { p.Penalty = Penalty{After: 1, Base: time.Minute, Max: time.Second} }, "penalty.max"},
		{"penalty without after", func(p *Policy) { p.Penalty = Penalty{Base: time.Second, Max: time.Minute} }, "penalty.after"},
		{"negative penalty after", func(p *Policy) { p.Penalty = Penalty{After: -1} }, "penalty.after"},
		{"lease ttl under min", func(p *Policy) { p.Algorithm, p.LeaseTTL = Concurrency, time.Microsecond }, "leaseTTL"},
		{"buckets that do not divide", func(p *Policy) { p.Algorithm, p.Window, p.Buckets = Quota, time.Hour, 7 }, "buckets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := valid
			tc.edit(&p)
			err := p.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.field != "" && err == nil:
				t.Fatalf("accepted %+v, want an error naming %s", p, tc.field)
			case tc.field != "" && FieldOf(err) != tc.field:
				t.Fatalf("error %q names %q, want %q", err, FieldOf(err), tc.field)
			case err != nil && KindOf(err) != KindInvalid:
				t.Fatalf("error %v is of kind %v, want invalid", err, KindOf(err))
			}
		})
	}
}

// TestValidPolicyName: the loop accepts what the documented pattern does.
func TestValidPolicyName(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9._:/-]{1,128}$`)
	for _, name := range []string{"", "a", "api", "a.b_c:d/e-f", "with space", "ü", "x*", strings.Repeat("a", 128), strings.Repeat("a", 129), "a\x00", "Z9"} {
		if got, want := ValidPolicyName(name), pattern.MatchString(name); got != want {
			t.Errorf("ValidPolicyName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestPenaltyNeedsBaseAndMax: a penalty has no default block (docs say
// {after, base, max}): one without base or max is refused naming the
// field as missing, not as a block of 0s.
func TestPenaltyNeedsBaseAndMax(t *testing.T) {
	for _, tc := range []struct {
		pen   Penalty
		field string
	}{
		{Penalty{After: 3}, "penalty.base"},
		{Penalty{After: 3, Max: time.Hour}, "penalty.base"},
		{Penalty{After: 3, Base: time.Minute}, "penalty.max"},
	} {
		p := Policy{Name: "p", Algorithm: FixedWindow, Limit: 1, Window: time.Minute, Penalty: tc.pen}
		err := p.Validate()
		if FieldOf(err) != tc.field || !strings.Contains(err.Error(), "is required") || strings.Contains(err.Error(), "got 0s") {
			t.Errorf("%+v: %v, want %s named as required", tc.pen, err, tc.field)
		}
	}
}
