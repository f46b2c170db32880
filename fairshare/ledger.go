package fairshare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Limiter is what LimiterLedger needs of Sluice's limiter (engine.Engine).
type Limiter interface {
	Check(ctx context.Context, req sluice.Request) (sluice.Result, error)
	Release(ctx context.Context, tenant string, c sluice.Check, lease uint64) (sluice.Decision, error)
}

// LimiterLedger is a Ledger kept in Sluice's own store through its
// limiter: five concurrency counters per upstream, in a space no request
// reaches, each node holding one named lease in each. A node's share is
// its lease in a counter whose limit is the upstream's rate (in 1/scale
// units), so the store's conditional writes keep the shares' sum within
// it. Its demand is its leases in four counters of no real limit, whose
// sums the store returns with every write: the light demand and the
// shortfall (in parts per million of the rate), the heavy weight (in
// hundredths) and the nodes.
// Each lease is its value plus one, as a lease of no units is none.
type LimiterLedger struct {
	lim   Limiter
	node  uint64
	ttl   time.Duration
	rate  float64
	share sluice.Check
	light sluice.Check
	heavy sluice.Check
	nodes sluice.Check
	short sluice.Check
}

// ledgerTenant owns the ledgers' counters: not a valid tenant id, so no
// tenant's counters share them.
const ledgerTenant = ":upstreams"

// Units of the published demand, and the most one node publishes.
const (
	lightUnits = 1e6 // light demand in parts per million of the rate
	heavyUnits = 100 // heavy weight in hundredths
	maxDemand  = sluice.MaxLimit / sluice.MaxLeases
)

// NewLimiterLedger returns the ledger of the upstream named upstream, of
// cfg, for node (its lease id: sluice.NamedLease set, unique among the
// nodes and new at each start), whose claims live for ttl.
func NewLimiterLedger(lim Limiter, upstream string, cfg Config, node uint64, ttl time.Duration) (*LimiterLedger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if node&sluice.NamedLease == 0 {
		return nil, fmt.Errorf("fairshare: node %#x must have sluice.NamedLease set", node)
	}
	cfg = cfg.withDefaults()
	counter := func(name string, limit int64) sluice.Check {
		return sluice.Check{
			Policy: sluice.Policy{Name: name, Algorithm: sluice.Concurrency, Limit: limit, LeaseTTL: ttl, FailMode: sluice.FailClosed},
			Key:    upstream, Lease: node, Space: sluice.SpaceInternal,
		}
	}
	l := &LimiterLedger{
		lim: lim, node: node, ttl: ttl, rate: float64(cfg.Rate),
		share: counter("fs:share", cfg.Rate*cfg.scale()),
		light: counter("fs:light", sluice.MaxLimit),
		heavy: counter("fs:heavy", sluice.MaxLimit),
		nodes: counter("fs:nodes", sluice.MaxLimit),
		short: counter("fs:short", sluice.MaxLimit),
	}
	for _, c := range []sluice.Check{l.share, l.light} {
		if err := c.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("fairshare: upstream %q: %w", upstream, err)
		}
	}
	return l, nil
}

// TTL implements Ledger.
func (l *LimiterLedger) TTL() time.Duration { return l.ttl }

// errFailed is a ledger write the store could not decide.
var errFailed = errors.New("fairshare: the store could not decide")

// Publish implements Ledger.
func (l *LimiterLedger) Publish(ctx context.Context, now time.Time, d Demand) (Demand, int, error) {
	light, heavy, nodes, short := l.light, l.heavy, l.nodes, l.short
	light.Hits = 1 + min(max(int64(d.Light/l.rate*lightUnits), 0), maxDemand-1)
	heavy.Hits = 1 + min(max(int64(d.Heavy*heavyUnits), 0), maxDemand-1)
	nodes.Hits = 1
	short.Hits = 1 + min(max(int64(d.Short/l.rate*lightUnits), 0), maxDemand-1)
	res, err := l.lim.Check(ctx, sluice.Request{Tenant: ledgerTenant, Hits: 1, Checks: []sluice.Check{light, heavy, nodes, short}})
	if err != nil {
		return Demand{}, 0, err
	}
	if !res.Allowed {
		return Demand{}, 0, fmt.Errorf("%w: publish denied (%+v)", errFailed, res.Decision)
	}
	held := func(d sluice.Decision) int64 { return d.Limit - d.Remaining }
	n := held(res.Decisions[2])
	sum := Demand{
		Light: float64(held(res.Decisions[0])-n) / lightUnits * l.rate,
		Heavy: float64(held(res.Decisions[1])-n) / heavyUnits,
		Short: float64(held(res.Decisions[3])-n) / lightUnits * l.rate,
	}
	return sum, int(n), nil
}

// Claim implements Ledger.
func (l *LimiterLedger) Claim(ctx context.Context, now time.Time, units int64) (bool, int64, error) {
	if units <= 0 {
		_, err := l.lim.Release(ctx, ledgerTenant, l.share, l.node)
		if errors.Is(err, sluice.ErrLeaseNotFound) {
			err = nil
		}
		return err == nil, 0, err
	}
	c := l.share
	c.Hits = units
	res, err := l.lim.Check(ctx, sluice.Request{Tenant: ledgerTenant, Hits: 1, Checks: []sluice.Check{c}})
	if err != nil {
		return false, 0, err
	}
	d := res.Decisions[0]
	if d.FailedClosed {
		return false, 0, errFailed
	}
	return d.Allowed, d.Remaining, nil
}

// Leave implements Ledger.
func (l *LimiterLedger) Leave(ctx context.Context, now time.Time) error {
	var errs []error
	for _, c := range []sluice.Check{l.share, l.light, l.heavy, l.nodes, l.short} {
		if _, err := l.lim.Release(ctx, ledgerTenant, c, l.node); err != nil && !errors.Is(err, sluice.ErrLeaseNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
