package dynamostore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Leased mode (sluice.Policy.Leased, fixed windows): a node takes a batch
// of a window's hits in one conditional write, sized to its recent rate on
// the key, and admits from the batch locally until it is spent or the
// window ends. The table still counts every hit taken, so no window ever
// admits more than Limit across all nodes: the overshoot is zero. The cost
// is the other way: hits taken but not used by the window's end are lost,
// at most one batch per node per window. A batch is the node's rate over
// LeasePeriod, at least the request's hits, at most Limit/MaxLeaseShare.
const (
	LeasePeriod   = time.Second
	MaxLeaseShare = 50 // a batch is at most 2% of the limit
)

// leases are a node's batches, by counter key. The key's turn is held
// around every use of an entry.
type leases struct {
	mu    sync.Mutex
	m     map[string]*lease
	calls int
}

type lease struct {
	window  int64 // start of the window the batch belongs to
	end     int64 // and its end
	left    int64 // hits of the batch not yet admitted
	remain  int64 // the window's remaining hits in the table, when taken
	count   int64 // requests since the last batch
	taken   int64 // when the last batch was taken
	resetAt time.Time
}

// get returns pk's lease, made if need be. The caller holds pk's turn;
// every 4096 calls, get drops the batches of windows over, each under its
// key's turn taken only if free (tryLock), so that the map stays bounded
// by the keys of current windows without touching an entry in use (nor
// waiting: the caller holds a turn).
func (l *leases) get(pk string, now int64, tryLock func(pk string) (func(), bool)) *lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*lease{}
	}
	if l.calls++; l.calls%4096 == 0 {
		for k, e := range l.m {
			if k == pk {
				continue
			}
			if unlock, ok := tryLock(k); ok {
				if e.end != 0 && e.end <= now {
					delete(l.m, k)
				}
				unlock()
			}
		}
	}
	e := l.m[pk]
	if e == nil {
		e = &lease{}
		l.m[pk] = e
	}
	return e
}

// leased decides one op of a leased fixed window. The caller holds pk's
// turn.
func (s *Store) leased(ctx context.Context, now int64, op *sluice.Op, pk string) (sluice.Decision, error) {
	p := op.Policy
	w := int64(p.Window)
	start := now - ((now%w)+w)%w
	e := s.leases.get(pk, now, s.tryLock)
	e.count++
	if e.window == start && e.left >= op.Hits {
		e.left -= op.Hits
		s.stats.leasedLocal.Add(1)
		return sluice.Decision{Policy: p.Name, Allowed: true, Limit: p.Limit, Remaining: e.remain + e.left, ResetAt: e.resetAt}, nil
	}
	// A new batch: the node's rate over the lease period, within bounds.
	elapsed := max(now-e.taken, int64(time.Millisecond))
	rate := float64(e.count) / float64(elapsed) * float64(LeasePeriod)
	batch := min(max(int64(rate+0.5), op.Hits), max(p.Limit/MaxLeaseShare, op.Hits))
	e.count, e.taken = 0, now
	for {
		take := *op
		take.Hits = batch
		dst := []sluice.Decision{{}}
		if err := s.applyVersioned(ctx, now, []sluice.Op{take}, dst); err != nil {
			return sluice.Decision{}, err
		}
		d := dst[0]
		if d.Allowed {
			e.window, e.end, e.left, e.remain, e.resetAt = start, start+w, batch-op.Hits, d.Remaining, d.ResetAt
			d.Remaining += e.left
			return d, nil
		}
		// Not a whole batch left: take what there is, if it serves.
		if d.Remaining >= op.Hits && d.Remaining < batch {
			batch = d.Remaining
			continue
		}
		e.window, e.end, e.left = start, start+w, 0
		return d, nil
	}
}
