package tenancy

import (
	"context"
	"log/slog"
)

// Weights are an upstream quota's weights of its customers, as the server
// started with them (config.Upstream): by tenant, and by tier.
type Weights struct {
	Tiers, Tenants map[string]int64
}

// UpstreamWeight returns tenant's weight under w: its own, else its tier's,
// else 1. Its tier is the store's, else the file's, else the default; if
// the store fails, the file's, logged: a weight is a share, not a wall.
func (s *Service) UpstreamWeight(ctx context.Context, w Weights, tenant string) int64 {
	if x, ok := w.Tenants[tenant]; ok {
		return x
	}
	t, err := s.View(ctx, tenant)
	if err != nil {
		s.weightLog.Log(s.opts.Logger, s.opts.Now(), slog.LevelWarn, "tenant store failed; weighing by the file's tier", "tenant", tenant, "err", err)
	}
	if x, ok := w.Tiers[t.Tier()]; ok {
		return x
	}
	return 1
}
