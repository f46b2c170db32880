package dynamostore

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Contention is not a fault. A node's concurrent decisions on one key (a
// single-policy request with hits, the common case, and the one that is
// hot under attack) are combined: the decisions that arrive while the key
// is being written wait together, and the next to take the key's turn
// decides them all (a batch, of up to maxBatch, first come first decided)
// in one conditional write, so that however many clients press one key,
// only the nodes contend for it. Each decision of a batch is decided, all
// or nothing as ever, in order against the key's state as the ones before
// it left it: the table sees one write of all the batch's admitted hits,
// and answers exactly as the decisions one at a time would have.
//
// A batch's write that loses to another node's (its condition fails on an
// item that changed since the state it was decided from) is decided again
// from the item that won, returned by the failure or, if the failure
// returned none, read consistently; such a loss does not count against
// Options.MaxAttempts, which bounds faults only (throttles, conflicts with
// transactions, 5xx, lost answers, and a failed condition on an item that
// did not change). A batch is bounded by time instead: each of its
// decisions waits for it until its own deadline, and it goes on while any
// of them still waits (a client gone does not fail the others), so a
// batch of others runs in a goroutine of its own, one per key at most: it
// holds the key's turn.
//
// No key waits on another: each key has its own turn and its own waiting
// list (keys), removed when the key is idle. A denial that the node's
// memory of the key already makes (the deny cache) waits for nothing.

// maxBatch caps the decisions of one batch: the work of deciding them
// while the key's turn is held, and one batch's wait, are bounded.
const maxBatch = 256

// call is a single-key decision waiting, with others on its key, for its
// answer.
type call struct {
	ctx    context.Context
	now    int64
	op     sluice.Op     // its Policy is policy
	policy sluice.Policy // a copy: a batch may outlive its caller's wait
	d      sluice.Decision
	err    error
	done   chan struct{} // closed once d and err are set
}

// combine decides op, on the key pk, together with this node's other
// decisions on it at the time.
func (s *Store) combine(ctx context.Context, now int64, op *sluice.Op, pk string) (sluice.Decision, error) {
	if d, ok := s.denyCached(now, op, pk); ok {
		return d, nil
	}
	k := s.keys.use(pk)
	defer s.keys.done(pk, k)
	c := &call{ctx: ctx, now: now, op: *op, policy: *op.Policy, done: make(chan struct{})}
	c.op.Policy = &c.policy
	k.mu.Lock()
	k.pending = append(k.pending, c)
	k.mu.Unlock()
	for {
		select {
		case <-c.done:
			return c.d, c.err
		default:
		}
		select {
		case <-c.done:
			return c.d, c.err
		case <-k.turn:
			// This decision's turn: it starts the first batch waiting,
			// its own among them unless another turn took it already.
			s.startBatch(pk, k, c)
		case <-ctx.Done():
			k.mu.Lock()
			i := slices.Index(k.pending, c)
			if i >= 0 {
				k.pending = slices.Delete(k.pending, i, i+1)
			}
			k.mu.Unlock()
			if i >= 0 {
				s.stats.lockTimeouts.Add(1)
				return sluice.Decision{}, &sluice.Error{Op: "dynamostore.combine", Kind: sluice.KindUnavailable, Message: "waiting for this node's other decisions on the key", Err: ctx.Err()}
			}
			select {
			case <-c.done:
				return c.d, c.err
			default:
			}
			// In a batch at work: its write may yet land this decision's
			// hits, erring on the side of the limit, as a write in flight
			// at a deadline does; the batch goes on for the others.
			return sluice.Decision{}, &sluice.Error{Op: "dynamostore.combine", Kind: sluice.KindUnavailable, Err: ctx.Err()}
		}
	}
}

// startBatch takes the first batch of the decisions waiting on key pk,
// whose turn the caller, c, holds, and decides it, giving the turn back
// once done. A batch of c alone is decided by c, within its own context; a
// batch of others is decided by a goroutine of its own, so that each of
// its decisions, c's too, waits for it only until its own deadline, and
// the batch goes on while any of them still waits.
func (s *Store) startBatch(pk string, k *keyTurn, c *call) {
	k.mu.Lock()
	n := min(len(k.pending), maxBatch)
	calls := slices.Clone(k.pending[:n])
	k.pending = slices.Delete(k.pending, 0, n)
	k.mu.Unlock()
	switch {
	case n == 0:
		k.turn <- struct{}{}
	case n == 1 && calls[0] == c:
		s.decideBatch(c.ctx, pk, calls)
		k.turn <- struct{}{}
	default:
		s.keys.use(pk) // the batch's, for as long as it holds the turn
		go func() {
			defer s.keys.done(pk, k)
			ctx, cancel := batchContext(calls)
			s.decideBatch(ctx, pk, calls)
			cancel()
			k.turn <- struct{}{}
		}()
	}
}

// decideBatch decides calls, all on key pk, within ctx, and gives each
// its answer.
func (s *Store) decideBatch(ctx context.Context, pk string, calls []*call) {
	s.stats.batches.Add(1)
	s.stats.batched.Add(int64(len(calls)))
	if len(calls) > 1 {
		s.stats.combined.Add(int64(len(calls)))
	}
	if len(calls) == 1 && calls[0].op.Policy.Algorithm == sluice.TokenBucket {
		// One alone: GCRA's updates need no state.
		c := calls[0]
		c.d, c.err = s.gcra(ctx, c.now, &c.op, pk)
	} else {
		s.decideCalls(ctx, pk, calls)
	}
	for _, c := range calls {
		close(c.done)
	}
}

// batchContext is the context of a batch's requests: the values of its
// first decision's, with the latest of their deadlines, and done when
// every one of its decisions has stopped waiting (their contexts are
// done): a client gone, or a decision past its deadline, does not fail the
// others, and a batch nobody waits for stops.
func batchContext(calls []*call) (context.Context, context.CancelFunc) {
	var dl time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			dl = time.Time{}
			break
		}
		if d.After(dl) {
			dl = d
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	if !dl.IsZero() {
		cancel()
		ctx, cancel = context.WithDeadline(context.WithoutCancel(calls[0].ctx), dl)
	}
	var waiting atomic.Int64
	waiting.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// denyCached answers a denial from the state this node remembers of pk,
// without waiting for the key's turn: other nodes' writes since, and this
// node's batches at work, can only have added hits, so the table would
// deny too (the deny cache: a key over its limit costs DynamoDB nothing,
// and a flood on it does not queue). Not for concurrency policies, whose
// leases another node may have released.
func (s *Store) denyCached(now int64, op *sluice.Op, pk string) (sluice.Decision, bool) {
	if op.Policy.Algorithm == sluice.Concurrency {
		return sluice.Decision{}, false
	}
	v, ok := s.cache.get(pk)
	if !ok {
		return sluice.Decision{}, false
	}
	var d sluice.Decision
	st := v.state
	// Clipped: an admission appends to a copy, never to the array the
	// remembered state shares with a batch at work.
	st.Entries = slices.Clip(st.Entries)
	algo.UpdateOp(op, &st, now, &d)
	if d.Allowed {
		return sluice.Decision{}, false
	}
	s.stats.localDenials.Add(1)
	return d, true
}

// decideCalls decides calls, all on key pk, in order against the key's
// state, and writes the admitted hits in one conditional write, decided
// again from the item that won each write lost to another node. A
// decision whose context has ended by then is left out; an error of the
// table fails every decision still in.
func (s *Store) decideCalls(ctx context.Context, pk string, calls []*call) {
	cur, _ := s.cache.get(pk)
	known := false // cur read from the table, not remembered
	b := s.budget()
	live := make([]*call, 0, len(calls))
	for {
		live = live[:0]
		for _, c := range calls {
			if err := c.ctx.Err(); err != nil {
				c.err = &sluice.Error{Op: "dynamostore.combine", Kind: sluice.KindUnavailable, Err: err}
				continue
			}
			live = append(live, c)
		}
		if len(live) == 0 {
			return
		}
		st := cur.state
		st.Entries = slices.Clip(st.Entries) // see denyCached
		admitted, leaseDenied := 0, false
		for _, c := range live {
			c.err = nil
			algo.UpdateOp(&c.op, &st, c.now, &c.d) // a denial leaves st as it was
			switch {
			case c.d.Allowed:
				admitted++
			case c.op.Policy.Algorithm == sluice.Concurrency:
				leaseDenied = true
			}
		}
		if leaseDenied && !known {
			// Another node may have released a lease: a denial of one
			// stands only on the state as the table has it.
			v, err := s.read(ctx, pk)
			if err != nil {
				fail(live, err)
				return
			}
			cur, known = v, true
			s.cache.put(pk, v)
			continue
		}
		if admitted == 0 {
			if !leaseDenied {
				s.stats.localDenials.Add(int64(len(live)))
			}
			return
		}
		lost, id, err := s.write(ctx, b, []string{pk}, []versioned{cur}, []int{0}, []algo.State{st}, []int{0}, nil)
		if err != nil {
			fail(live, err)
			return
		}
		if lost == nil {
			s.cache.put(pk, after(cur, st, id))
			return
		}
		// Lost: decide again from what the table holds.
		s.stats.conflicts.Add(1)
		b.lost(changed(cur, lost[0]))
		cur, known = lost[0], true
		s.cache.put(pk, cur)
	}
}

// fail gives every decision of calls the error err.
func fail(calls []*call, err error) {
	for _, c := range calls {
		c.d, c.err = sluice.Decision{}, err
	}
}

// changed reports whether a counter item, as a failed condition found it,
// differs from the state the write was conditioned on: another writer
// wrote since (contention). A condition that failed on an unchanged item
// is no race with anyone: a fault, counted as one.
func changed(from, now versioned) bool {
	if from.kind != now.kind {
		return true
	}
	switch from.kind {
	case noItem:
		return false
	case tatItem:
		return from.state.TAT != now.state.TAT
	}
	return from.version != now.version || from.write != now.write
}
