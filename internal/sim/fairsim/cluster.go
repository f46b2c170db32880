package fairsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	sluicehq "github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/store/memstore"
)

// MaxNodes bounds Config.Nodes.
const MaxNodes = 16

// interval is how often a node resizes its share, as on an Upstream.
const interval = fairshare.DefaultInterval

// cluster is Sluice on several nodes sharing the upstream, each node a
// fairshare.Scheduler whose rate a fairshare.Balancer sizes, wired as
// fairshare.Upstream wires them, each Balancer with a LimiterLedger on the
// one engine and store all the nodes reach. The engine and the store read
// the virtual clock, which is set before every call into them, so that
// claims and demands lapse in simulated time.
type cluster struct {
	clock atomic.Int64 // the virtual time since epoch; the store's sweep reads it from its own goroutine
	store *memstore.Store
	custs []customer
	nodes []*node
	err   error // the first error a ledger returned
}

// node is one Sluice node of a cluster.
type node struct {
	*sluice
	index int
	bal   *fairshare.Balancer
	rate  int64         // the rate its last step gave: 0, it holds no share
	due   time.Duration // its next step
	retry time.Duration // its next reclaim; -1: none
	grew  bool          // a reclaim to grow ran since its last step
	last  time.Duration // its last step or reclaim
}

func newCluster(cfg Config, custs []customer) (*cluster, error) {
	c := &cluster{custs: custs}
	now := func() time.Time { return epoch.Add(time.Duration(c.clock.Load())) }
	c.store = memstore.New(memstore.Options{Now: now})
	eng := engine.New(c.store, engine.Options{Now: now})
	for i := range cfg.Nodes {
		n, err := newNode(cfg, custs, eng, i)
		if err != nil {
			c.store.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	return c, nil
}

// newNode returns node i of cfg.Nodes, serving custs, ledger on eng. The nodes step in
// turn, spread evenly over an interval, as nodes started at different
// times do, so that they do not all read the sums at the same instant.
func newNode(cfg Config, custs []customer, eng *engine.Engine, i int) (*node, error) {
	s, err := newSluice(cfg, custs)
	if err != nil {
		return nil, err
	}
	fc := schedulerConfig(cfg)
	l, err := fairshare.NewLimiterLedger(eng, "upstream", fc, sluicehq.NamedLease|uint64(i+1), fairshare.DefaultTTL(fc.Window))
	if err != nil {
		return nil, err
	}
	b, err := fairshare.NewBalancer(fc, l, 0)
	if err != nil {
		return nil, err
	}
	// Nothing goes until the node's first step claims a share.
	s.s.SetRate(epoch, 0, 0, time.Time{})
	s.s.TrackDemand(epoch)
	return &node{
		sluice: s, index: i, bal: b,
		due:   time.Duration(i) * interval / time.Duration(cfg.Nodes),
		retry: -1,
		last:  -interval, // an early step may come at once
	}, nil
}

func (c *cluster) name() string { return "sluice" }

// arrive offers r to its tenant's node. A request the node admits while
// it holds no share makes it step at once, as on an Upstream, unless it
// resized less than a quarter of an interval ago.
func (c *cluster) arrive(now time.Duration, r *request) {
	n := c.nodes[c.custs[r.cust].tenant%len(c.nodes)]
	n.arrive(now, r)
	if r.state != refused && n.rate == 0 && now-n.last >= interval/4 {
		c.resize(n, now, true)
	}
}

// next steps the nodes whose step is due and reclaims for those whose
// reclaim is, then releases what each node's scheduler allows, and returns
// the earliest time a node wakes, steps or reclaims.
func (c *cluster) next(now time.Duration) ([]*request, time.Duration) {
	var grants []*request
	wake := time.Duration(math.MaxInt64)
	for _, n := range c.nodes {
		switch {
		case n.due <= now:
			c.resize(n, now, true)
		case n.retry >= 0 && n.retry <= now:
			c.resize(n, now, false)
		}
		gs, w := n.next(now)
		grants = append(grants, gs...)
		if w >= 0 {
			wake = min(wake, w)
		}
		wake = min(wake, n.due)
		if n.retry >= 0 {
			wake = min(wake, n.retry)
		}
	}
	return grants, wake
}

// resize runs one Balancer step of n at now on its scheduler's demand, or
// only a claim if not step, applies the share and schedules the next, as
// Upstream's balance loop does. A ledger error leaves a share that is
// still safe, which the node applies as an Upstream does; the run reports
// the first.
func (c *cluster) resize(n *node, now time.Duration, step bool) {
	// A request past its wait would have been withdrawn by now on an
	// Upstream: it asks for nothing.
	n.expire(now)
	t := epoch.Add(now)
	c.clock.Store(int64(now))
	// The ledger answers at once here, so a lower rate takes effect at
	// the step's own time.
	lower := func(sh fairshare.Share) fairshare.Released {
		n.s.SetRate(t, sh.Rate, sh.Expect, sh.Stop)
		return n.s.Released(t, sh.Rate)
	}
	var (
		sh  fairshare.Share
		err error
	)
	if step {
		sh, err = n.bal.Step(context.Background(), t, demands(n.s, t), lower)
		n.due, n.grew = now+interval, false
	} else {
		sh, err = n.bal.Reclaim(context.Background(), t, lower)
	}
	if err != nil && c.err == nil {
		c.err = fmt.Errorf("fairsim: node %d at %v: %w", n.index, now, err)
	}
	n.s.SetRate(t, sh.Rate, sh.Expect, sh.Stop)
	n.rate, n.last, n.retry = sh.Rate, now, -1
	if after, growing, ok := sh.NextReclaim(t, interval, n.grew); ok {
		n.retry, n.grew = now+after, growing
	}
}

// demands returns s's demands in a fixed order. The scheduler lists them
// in its map's order and the Balancer sums their rates in the order given:
// sorted, the sums round alike from run to run, and so does the run.
func demands(s *fairshare.Scheduler, now time.Time) []fairshare.GroupDemand {
	ds := s.Demands(now)
	slices.SortFunc(ds, func(a, b fairshare.GroupDemand) int {
		return cmp.Or(cmp.Compare(a.Rate, b.Rate), cmp.Compare(a.Weight, b.Weight))
	})
	return ds
}

// close stops the store's sweep and returns the first ledger error.
func (c *cluster) close() error {
	return errors.Join(c.err, c.store.Close())
}
