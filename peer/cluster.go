package peer

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
)

// Store is a shared store's record of the nodes' runs (dynamostore.Store).
type Store interface {
	Announce(ctx context.Context, h sluice.Heartbeat) error
	Heartbeats(ctx context.Context) ([]sluice.Heartbeat, error)
}

// DefaultHeartbeat is how often a node announces itself; an announcement
// lasts three of them, and a run counts as dead one more after that.
const DefaultHeartbeat = 5 * time.Second

// requestTimeout bounds a node's answer to a request's gather (GatherFor):
// a slow node is left out, and named.
const requestTimeout = 2 * time.Second

// Cluster is this node and the other nodes of a shared store. It announces
// this node's run (Announce), lists the other live nodes (Peers), asks
// them at once (Gather: the dashboard's sums, each node keeping what it
// decided), and tells the gateway which runs are live, so that it counts
// connections without renewing them (Self, Dead): a run's heartbeat lasts
// three heartbeat periods from its write; a run whose heartbeat ended one
// more period ago is dead, and its leases (those of its tag) count for no
// one. A node whose own heartbeat has not landed within its life is not
// live (Self), admits nothing, and runs under a new tag once it announces
// again: the others may already have counted its leases as a dead run's.
// Safe for concurrent use.
//
// A nil *Cluster is this node alone, unnamed: it gathers nothing, and
// names this node "".
type Cluster struct {
	self   string
	store  Store
	client *Client
	log    *slog.Logger
	every  time.Duration

	mu    sync.Mutex
	list  []string        // the other live nodes, read at asked
	gone  map[string]bool // the nodes with runs, none live
	dead  []uint16        // the tags of the dead runs whose leases may be left
	asked time.Time
	// reading is set while one caller reads the list from the store.
	reading bool
	tag     uint16    // this run's
	past    []uint16  // this node's earlier tags, dead from their change
	until   time.Time // the until of this run's last heartbeat that landed
}

// NewCluster returns the cluster of node self (its base URL, as the others
// reach it) whose live nodes store lists, asked through client. A nil
// store is a store of one process: a cluster of this node alone. log
// receives the failures to announce and to answer; nil: discard.
func NewCluster(self string, store Store, client *Client, log *slog.Logger) *Cluster {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cluster{self: self, store: store, client: client, log: log, every: DefaultHeartbeat, tag: newTag(nil)}
}

// WithHeartbeat sets how often the node announces itself (DefaultHeartbeat
// if not set), before Announce runs, and returns c.
func (c *Cluster) WithHeartbeat(every time.Duration) *Cluster {
	if every > 0 {
		c.every = every
	}
	return c
}

// Heartbeat returns how often the node announces itself: a dead node's
// leases count for no one within five of them of its death.
func (c *Cluster) Heartbeat() time.Duration { return c.every }

// newTag returns a random tag, not 0 and none of taken.
func newTag(taken []uint16) uint16 {
	for {
		t := uint16(rand.Uint32())
		if t != 0 && !slices.Contains(taken, t) {
			return t
		}
	}
}

// Announce records this node's run as live, at once and every heartbeat
// period, until ctx ends, and reads the list of runs after each; without a
// store it returns at once. Its caller runs it in a goroutine it owns, and
// stops it by ending ctx.
func (c *Cluster) Announce(ctx context.Context) {
	if c.store == nil {
		return
	}
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		c.announce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Join writes this node's first heartbeat and reads the runs, before
// Announce runs: a node is not live (Self) until a heartbeat has landed.
// A failure is logged; Announce tries again.
func (c *Cluster) Join(ctx context.Context) {
	if c.store != nil {
		c.announce(ctx)
	}
}

// announce writes one heartbeat, under a new tag if the last one to land
// has ended, and reads the runs.
func (c *Cluster) announce(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, c.every)
	defer cancel()
	start := time.Now()
	c.mu.Lock()
	if !c.until.IsZero() && !start.Before(c.until) {
		// Lapsed: the others may count this run's leases as dead.
		c.past = append(c.past, c.tag)
		if len(c.past) > sluice.MaxDeadOwners/2 {
			c.past = c.past[1:]
		}
		c.tag = newTag(append(slices.Clone(c.dead), c.past...))
		c.log.Warn("cluster: this node's heartbeat lapsed; it runs under a new tag, its connections counted anew", "tag", c.tag)
	}
	h := sluice.Heartbeat{Node: c.self, Tag: c.tag, Until: start.Add(3 * c.every)}
	c.mu.Unlock()
	if err := c.store.Announce(actx, h); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cluster: announcing this node failed; other nodes' dashboards miss its counts, and it admits no connection once its heartbeat ends", "err", err)
		}
	} else {
		c.mu.Lock()
		if c.tag == h.Tag {
			c.until = h.Until
		}
		c.mu.Unlock()
	}
	if _, err := c.read(actx, true); err != nil && ctx.Err() == nil {
		c.log.Warn("cluster: listing the nodes failed", "err", err)
	}
}

// Self returns this run's tag, and whether its heartbeat is live now.
func (c *Cluster) Self() (tag uint16, live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tag, time.Now().Before(c.until)
}

// Dead returns the tags of the dead runs whose leases may still be in a
// counter, this node's earlier ones first, at most sluice.MaxDeadOwners;
// as of the last list read, never a tag of a live run.
func (c *Cluster) Dead() []uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append(slices.Clone(c.past), c.dead...)
	return out[:min(len(out), sluice.MaxDeadOwners)]
}

// Gone reports whether node is known to have no live run, as of the last
// list read: its runs are all dead. A node not heard of is not gone: it
// may have started since.
func (c *Cluster) Gone(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone[node]
}

// Peers returns the live nodes but this one, read from the store at most
// once per heartbeat period; none without a store. No caller waits on
// another's read of the store: while one reads, the others take the list
// read last.
func (c *Cluster) Peers(ctx context.Context) ([]string, error) {
	if c.store == nil {
		return nil, nil
	}
	return c.read(ctx, false)
}

// read returns the live nodes but this one: the list read last, unless it
// is older than a heartbeat period (or always, if fresh) and no other
// caller is reading it.
func (c *Cluster) read(ctx context.Context, fresh bool) ([]string, error) {
	c.mu.Lock()
	if (!fresh && time.Since(c.asked) < c.every) || c.reading {
		list := c.list
		c.mu.Unlock()
		return list, nil
	}
	c.reading = true
	c.mu.Unlock()
	runs, err := c.store.Heartbeats(ctx)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = false
	if err != nil {
		return nil, err
	}
	var list []string
	live := []uint16{c.tag}
	var ended []sluice.Heartbeat
	for _, h := range runs {
		switch {
		case h.Until.After(now):
			live = append(live, h.Tag)
			if h.Node != c.self && !slices.Contains(list, h.Node) {
				list = append(list, h.Node)
			}
		case h.Until.Add(c.every).Before(now):
			// Dead: its leases and registrations, written while it
			// lived, may live on for their backstops.
			ended = append(ended, h)
		}
	}
	// Newest dead first: the oldest's leases are the likeliest ended.
	slices.SortFunc(ended, func(a, b sluice.Heartbeat) int { return b.Until.Compare(a.Until) })
	var dead []uint16
	gone := map[string]bool{}
	for _, h := range ended {
		if h.Tag != 0 && h.Until.Add(gateway.CountBackstop).After(now) && !slices.Contains(live, h.Tag) && !slices.Contains(dead, h.Tag) {
			dead = append(dead, h.Tag)
		}
		if h.Node != c.self && !slices.Contains(list, h.Node) {
			gone[h.Node] = true
		}
	}
	c.list, c.gone, c.dead, c.asked = list, gone, dead, now
	return c.list, nil
}

// Gathered is what the other nodes answered a gather: their bodies, the
// nodes counted (this one first, then those that answered), and those
// that did not answer.
type Gathered struct {
	Bodies  [][]byte
	Nodes   []string
	Missing []string
}

// alone is a gather of this node alone.
func (c *Cluster) alone() Gathered {
	self := ""
	if c != nil {
		self = c.self
	}
	return Gathered{Nodes: []string{self}}
}

// GatherFor is Gather for a request r, each node given 2 seconds, unless
// r is itself another node's (Forwarded): that is answered by this node
// alone.
func (c *Cluster) GatherFor(r *http.Request, pathAndQuery string) Gathered {
	if c == nil || Forwarded(r) {
		return c.alone()
	}
	return c.Gather(r.Context(), pathAndQuery, requestTimeout)
}

// Gather asks every other node for pathAndQuery (Client.Get), at once,
// each for at most timeout, and returns their answers. A node that does
// not answer in time, or answers an error, is logged and named missing; a
// failure to list the nodes is logged, and gathers this node alone.
func (c *Cluster) Gather(ctx context.Context, pathAndQuery string, timeout time.Duration) Gathered {
	g := c.alone()
	if c == nil || c.store == nil {
		return g
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	peers, err := c.Peers(ctx)
	if err != nil {
		c.log.Warn("dashboard: listing the other nodes failed; showing this node's counts", "err", err)
		return g
	}
	bodies := make([][]byte, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			b, err := c.client.Get(ctx, p, pathAndQuery)
			if err != nil {
				c.log.Warn("dashboard: a node did not answer; its counts are missing", "node", p, "err", err)
				return
			}
			bodies[i] = b
		})
	}
	wg.Wait()
	for i, b := range bodies {
		if b == nil {
			g.Missing = append(g.Missing, peers[i])
			continue
		}
		g.Nodes = append(g.Nodes, peers[i])
		g.Bodies = append(g.Bodies, b)
	}
	return g
}

// DecodeEach unmarshals each of a gather's bodies into a new T, skipping
// (and logging to log) those that are not one.
func DecodeEach[T any](bodies [][]byte, log *slog.Logger) []T {
	out := make([]T, 0, len(bodies))
	for _, b := range bodies {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			log.Warn("dashboard: a node's answer is not understood", "err", err)
			continue
		}
		out = append(out, v)
	}
	return out
}
