// Package logevery bounds a log line that a request can cause: during an
// outage, a store's failure is met by every request, and a line for each
// would flood the log at the request rate. A Gate lets one line through an
// interval and counts the rest, so the next line says how many it stands
// for. It takes no lock and keeps no state per tenant: every request of an
// outage shares one gate.
package logevery

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// DefaultInterval is the least time between two lines of one gate.
const DefaultInterval = 10 * time.Second

// Gate lets one line through each interval. The zero value lets one
// through every DefaultInterval; a Gate must not be copied after first use.
type Gate struct {
	// Interval is the least time between two lines; 0 means
	// DefaultInterval.
	Interval time.Duration

	next    atomic.Int64 // unix nanoseconds from which the next line may pass
	skipped atomic.Int64 // lines held back since the last one let through
}

// Allow reports whether a line may be logged at now, and if so how many
// were held back since the last one let through: the line should say so
// (for example as a "suppressed" attribute).
func (g *Gate) Allow(now time.Time) (ok bool, suppressed int64) {
	t := now.UnixNano()
	next := g.next.Load()
	if t < next || !g.next.CompareAndSwap(next, t+int64(g.interval())) {
		g.skipped.Add(1)
		return false, 0
	}
	return true, g.skipped.Swap(0)
}

func (g *Gate) interval() time.Duration {
	if g.Interval > 0 {
		return g.Interval
	}
	return DefaultInterval
}

// Log logs msg at level if the gate lets a line through at now, with a
// "suppressed" attribute counting the lines held back before it, if any.
func (g *Gate) Log(log *slog.Logger, now time.Time, level slog.Level, msg string, args ...any) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	ok, n := g.Allow(now)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Log(context.Background(), level, msg, args...)
}
