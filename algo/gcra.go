package algo

import "github.com/sluicehq/sluice"

// TokenBucket is a token bucket holding up to p.EffectiveBurst() tokens,
// refilled at p.Limit tokens per p.Window, computed as the generic cell rate
// algorithm (GCRA): the state is one number, the theoretical arrival time
// (TAT) at which the bucket would be full again.
//
// Burst is the bucket's capacity: a fresh or long idle key admits Burst hits
// at once, then one hit per emission interval Window/Limit (rounded up to the
// nanosecond, so the rate never exceeds Limit per Window). A request of n
// hits is admitted if n tokens are in the bucket:
//
//	T   = ceil(Window / Limit)          emission interval
//	tau = Burst * T                     bucket depth in time
//	tat = max(TAT, now) + n*T           TAT after admitting
//	admitted iff tat - now <= tau
//
// Remaining is the number of whole tokens left, ResetAt the time the bucket
// is full again (TAT), and RetryAfter the wait until n tokens are back.
func TokenBucket(p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	return pure(tokenBucket, p, s, now, hits)
}

func tokenBucket(p *sluice.Policy, s *State, now, hits int64, d *sluice.Decision) {
	burst := p.EffectiveBurst()
	t := EmissionInterval(p)
	tau := burst * t
	tat := now
	if s.Algorithm == sluice.TokenBucket && s.TAT > now {
		tat = s.TAT
	}
	used := (tat - now + t - 1) / t // whole tokens missing from a full bucket
	if hits > burst {
		decide(d, p, burst, false, used, now, tat, now)
		return
	}
	next := tat + hits*t
	if next-now > tau {
		decide(d, p, burst, false, used, now, tat, next-tau)
		return
	}
	if hits == 0 {
		decide(d, p, burst, true, used, now, tat, now)
		return
	}
	*s = State{Algorithm: sluice.TokenBucket, TAT: next, Expires: next}
	decide(d, p, burst, true, (next-now+t-1)/t, now, next, now)
}

// EmissionInterval returns the token bucket's time per token in nanoseconds:
// Window/Limit rounded up.
func EmissionInterval(p *sluice.Policy) int64 {
	return (int64(p.Window) + p.Limit - 1) / p.Limit
}
