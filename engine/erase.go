package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Erase deletes the state of tenant's key value (docs/privacy.md): the
// counter and the penalty box of each of checks (the tenant's configured
// policies under that key, as a check of it resolves them) and, where the
// store finds them (sluice.KeyEraser), every other counter of the key. It
// returns how many states the store deleted. A store that erases nothing
// is KindInternal: a wiring mistake.
func (e *Engine) Erase(ctx context.Context, tenant, value string, checks []sluice.Check) (int, error) {
	if err := validateTenant(tenant); err != nil {
		return 0, sluice.WithOp("engine.erase", err)
	}
	er, ok := e.store.(sluice.KeyEraser)
	if !ok {
		return 0, &sluice.Error{Op: "engine.erase", Kind: sluice.KindInternal, Message: "the store cannot erase keys"}
	}
	known := make([]sluice.Key, 0, 2*len(checks))
	for i := range checks {
		known = append(known, checks[i].CounterKey(tenant), checks[i].BoxKey(tenant))
	}
	// Not a decision: a pass over the tenant's counters (memory, Pebble),
	// or a Query and deletes per policy, algorithm and region (DynamoDB).
	ctx, cancel := context.WithTimeout(ctx, eraseTimeout)
	defer cancel()
	n, err := er.EraseKey(ctx, tenant, value, known)
	return n, sluice.WithOp("engine.erase", err)
}

// eraseTimeout bounds an erase's store work.
const eraseTimeout = 30 * time.Second
