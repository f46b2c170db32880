package algo

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Lift, as the hits of an op on a penalty box, clears the box: the
// operator lifts a key's penalty. The op is admitted, its RetryAfter what
// was left of the block. Only the engine builds such ops; requests
// cannot carry negative hits.
const Lift = -1

// penaltyBox keeps a key's offences under a policy with a Penalty (p is the
// box's policy: the penalty and the window of the policy it guards). Hits of
// zero ask whether the key is blocked: Allowed is false while it is, with
// RetryAfter the rest of the block. Hits above zero record that many
// offences (denials by the guarded policy) and are always admitted: once
// Penalty.After offences come with less than Window between them, the key
// is blocked for Penalty.Base, doubled at each further block, up to
// Penalty.Max. After Max without a block, the doubling starts over.
//
// State: Count is the offences of the current streak, Start the time of the
// last one, Prev the number of blocks so far, TAT the end of the block.
func penaltyBox(p *sluice.Policy, s *State, now, hits int64, d *sluice.Decision) {
	pen := p.Penalty
	st := State{}
	if s.Algorithm == sluice.PenaltyBox {
		st = *s
	}
	maxBlock := int64(pen.Max)
	if st.TAT != 0 && now >= st.TAT+maxBlock {
		st.Prev = 0 // behaved for a whole Max: forgiven
	}
	if now-st.Start >= int64(p.Window) {
		st.Count = 0
	}
	if hits == Lift {
		// The operator's pardon: no offences, no block, no history.
		// RetryAfter reports what was left of the block lifted.
		*d = sluice.Decision{Policy: p.Name, Allowed: true, Limit: int64(pen.After), ResetAt: unix(now)}
		if s.Algorithm == sluice.PenaltyBox && now < s.TAT {
			d.RetryAfter = time.Duration(s.TAT - now)
		}
		*s = State{Algorithm: sluice.PenaltyBox, Expires: now + int64(p.Window)}
		return
	}
	blocked := now < st.TAT
	if hits == 0 {
		*d = sluice.Decision{Policy: p.Name, Allowed: !blocked, Limit: int64(pen.After), ResetAt: unix(max(st.TAT, now))}
		if blocked {
			d.RetryAfter = time.Duration(st.TAT - now)
		}
		return
	}
	st.Algorithm = sluice.PenaltyBox
	st.Count += hits
	st.Start = now
	if st.Count >= int64(pen.After) {
		block := int64(pen.Base)
		for i := int64(0); i < st.Prev && block < maxBlock; i++ {
			block *= 2
		}
		st.TAT = now + min(block, maxBlock)
		st.Prev++
		st.Count = 0
	}
	st.Expires = max(st.TAT+maxBlock, st.Start+int64(p.Window))
	*s = st
	*d = sluice.Decision{Policy: p.Name, Allowed: true, Limit: int64(pen.After), ResetAt: unix(max(st.TAT, now))}
}
