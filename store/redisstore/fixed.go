package redisstore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// A fixed window's state is stored as text the script can read and count
// in, "F<start>:<window>:<count>", the start and the window nanoseconds in
// 19 digits (so that two starts compare as strings, Lua's doubles being
// unable to hold nanoseconds), the count in decimal; the call's id
// follows, as for every state. With it a decision on a fixed window is one
// round trip even when the node's view of the key is stale (another node
// wrote it since): the script checks not the bytes the node decided from
// but the node's verdict, applying algo's rule (the stored window if it
// starts at or after the aligned one, else a new window; admitted if
// hits ≤ limit and count + hits ≤ limit) to what it reads, and adds the
// hits itself. The node then decides again from the state the script
// answers, which gives the same verdicts, to fill the decisions' other
// fields (remaining, reset). The verdict is only a gate: a script whose
// rule disagreed with algo's would fail the call, which the node decides
// again from the values answered, compared as bytes (a round trip more,
// never a wrong answer); what the decisions rest on is the window and
// count the script writes, which TestFixedWindowModel holds to
// algo.DecideAll. The other algorithms' maths stays in Go only: a stale
// view costs them a second round trip.

// fixedMax bounds the limits and hits counted in the script: far below
// 2^53, where Lua's doubles stop being exact.
const fixedMax = 1 << 50

// fixedSpec is a fixed window key's part of a script run: its aligned
// window start, window, limit and hits, and the node's verdict. A zero
// spec (start "") leaves the key to the comparison of bytes.
type fixedSpec struct {
	start, window, limit, hits string
	allowed                    bool
}

// digits19 is n in 19 digits, zero-padded.
func digits19(n int64) string { return fmt.Sprintf("%019d", n) }

// encodeFixed is st's text form, for a fixed window in range.
func encodeFixed(st *algo.State) string {
	return "F" + digits19(st.Start) + ":" + digits19(st.Expires-st.Start) + ":" + strconv.FormatInt(st.Count, 10)
}

// fixedText reports whether st is stored as text: a fixed window whose
// numbers fit the text's digits and the script's doubles.
func fixedText(st *algo.State) bool {
	return st.Algorithm == sluice.FixedWindow && st.Start >= 0 && st.Expires >= st.Start && st.Count >= 0 && st.Count < fixedMax
}

// decodeFixed reads a fixed window's text form (without the id).
func decodeFixed(v string) (algo.State, error) {
	parts := strings.Split(v[1:], ":")
	if len(parts) != 3 || len(parts[0]) != 19 || len(parts[1]) != 19 {
		return algo.State{}, fmt.Errorf("redisstore: fixed window state %q: want F<start>:<window>:<count>", v)
	}
	var n [3]int64
	for i, p := range parts {
		x, err := strconv.ParseInt(p, 10, 64)
		if err != nil || x < 0 {
			return algo.State{}, fmt.Errorf("redisstore: fixed window state %q: %q is not a count", v, p)
		}
		n[i] = x
	}
	return algo.State{Algorithm: sluice.FixedWindow, Start: n[0], Count: n[2], Expires: n[0] + n[1]}, nil
}

// specOf is the spec of op, the one op on its key, decided allowed or not
// at now; ok is false when the script cannot count it (another algorithm,
// numbers out of its range).
func specOf(op *sluice.Op, now int64, allowed bool) (fixedSpec, bool) {
	p := op.Policy
	if p.Algorithm != sluice.FixedWindow || p.Limit < 0 || p.Limit >= fixedMax || op.Hits < 0 || op.Hits >= fixedMax || now < 0 {
		return fixedSpec{}, false
	}
	w := int64(p.Window)
	start := now - now%w // algo's alignment, for a time after the epoch
	return fixedSpec{start: digits19(start), window: digits19(w), limit: strconv.FormatInt(p.Limit, 10),
		hits: strconv.FormatInt(op.Hits, 10), allowed: allowed}, true
}
