package server

import (
	"fmt"
	"log/slog"
	"math/rand/v2"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/forward"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/tenancy"
)

// newUpstreams starts a fair-share scheduler for each upstream of cfg.
// On a store that many nodes share (shared), each upstream's rate is split
// among the nodes by a ledger in that store (fairshare.Balancer); this
// node's claims in it are named by a random id of its own, new at each
// start, so that a restarted node starts with what is free.
func newUpstreams(cfg *config.Config, lim fairshare.Limiter, shared bool, m *metrics.Upstreams, log *slog.Logger) (map[string]httpapi.Upstream, error) {
	ups := map[string]httpapi.Upstream{}
	node := sluice.NamedLease | rand.Uint64()
	for _, name := range cfg.UpstreamNames() {
		uc := cfg.Upstreams[name]
		sc := uc.Scheduler()
		opts := fairshare.Options{Logger: log.With("upstream", name), Observer: m.Observer(name)}
		if shared {
			l, err := fairshare.NewLimiterLedger(lim, name, sc, node, fairshare.DefaultTTL(sc.Window))
			if err != nil {
				closeUpstreams(ups)
				return nil, fmt.Errorf("serve: upstream %s: %w", name, err)
			}
			opts.Ledger = l
		}
		q, err := fairshare.NewUpstream(sc, opts)
		if err != nil {
			closeUpstreams(ups)
			return nil, fmt.Errorf("serve: upstream %s: %w", name, err)
		}
		m.Live(name, func() fairshare.Stats { return q.Stats(0) })
		up := httpapi.Upstream{Quota: q, MaxWait: uc.MaxWait, Weights: tenancy.Weights{Tiers: uc.TierWeights, Tenants: uc.TenantWeights}, Margin: uc.Margin}
		ups[name] = up
		if t, ok := uc.Target(); ok {
			t.Logger = opts.Logger
			if up.Proxy, err = forward.New(t); err != nil {
				closeUpstreams(ups)
				return nil, fmt.Errorf("serve: upstream %s: %w", name, err)
			}
			ups[name] = up
		}
	}
	return ups, nil
}

// closeUpstreams stops them; waiting requests end with fairshare.ErrClosed,
// and their proxies' idle connections close. Closing twice is harmless.
func closeUpstreams(ups map[string]httpapi.Upstream) {
	for _, u := range ups {
		u.Quota.Close()
		if u.Proxy != nil {
			u.Proxy.Close()
		}
	}
}
