package algo

import "github.com/sluicehq/sluice"

// DecideAll decides ops all-or-nothing at now, for stores. stored[i] holds
// the stored state of ops[i].Key (ops on the same key get the same state);
// DecideAll does not change it. Each op sees the effect of the ops before it
// on the same key.
//
// If every op is admitted, DecideAll returns true and next[i] holds the
// state to store for ops[i]: writing them in order leaves each key with its
// last op's state. Otherwise it returns false and the caller must store
// nothing; dst then holds the denials and, for the ops that would have been
// admitted, their key's stored state read with zero hits, since nothing was
// consumed.
func DecideAll(ops []sluice.Op, stored, next []State, now int64, dst []sluice.Decision) bool {
	allowed := true
	for i := range ops {
		next[i] = stored[i]
		for j := i - 1; j >= 0; j-- {
			if ops[j].Key == ops[i].Key {
				next[i] = next[j]
				break
			}
		}
		UpdateOp(&ops[i], &next[i], now, &dst[i])
		allowed = allowed && dst[i].Allowed
	}
	if !allowed {
		for i := range ops {
			if dst[i].Allowed {
				st := stored[i]
				Update(ops[i].Policy, &st, now, 0, &dst[i])
			}
		}
	}
	return allowed
}
