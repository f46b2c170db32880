package peer

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Store is a shared store's list of live nodes (dynamostore.Store).
type Store interface {
	Announce(ctx context.Context, node string, until time.Time) error
	Nodes(ctx context.Context, now time.Time) ([]string, error)
}

// How often a node announces itself, and how long an announcement lasts:
// a node gone is dropped from the dashboard's sums within announceTTL.
const (
	announceEvery = 5 * time.Second
	announceTTL   = 15 * time.Second
	peersFresh    = 5 * time.Second // how long a list of nodes is reused
	// requestTimeout bounds a node's answer to a request's gather
	// (GatherFor): a slow node is left out, and named.
	requestTimeout = 2 * time.Second
)

// Cluster is this node and the other nodes of a shared store, as the
// dashboard sums them: each node keeps what it decided, and the node a
// dashboard asks asks the others for theirs. Nothing of it goes through
// the store but the list of nodes. It announces this node (Announce),
// lists the others (Peers) and asks them at once (Gather). Safe for
// concurrent use.
//
// A nil *Cluster is this node alone, unnamed: it gathers nothing, and
// names this node "".
type Cluster struct {
	self   string
	store  Store
	client *Client
	log    *slog.Logger

	mu    sync.Mutex
	list  []string
	asked time.Time
	// reading is set while one caller reads the list from the store.
	reading bool
}

// NewCluster returns the cluster of node self (its base URL, as the others
// reach it) whose live nodes store lists, asked through client. A nil
// store is a store of one process: a cluster of this node alone. log
// receives the failures to announce and to answer; nil: discard.
func NewCluster(self string, store Store, client *Client, log *slog.Logger) *Cluster {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cluster{self: self, store: store, client: client, log: log}
}

// Announce records this node as live every 5 seconds, for 15, until ctx
// ends; without a store it returns at once. Its caller runs it in a
// goroutine it owns, and stops it by ending ctx.
func (c *Cluster) Announce(ctx context.Context) {
	if c.store == nil {
		return
	}
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, announceEvery)
		if err := c.store.Announce(actx, c.self, time.Now().Add(announceTTL)); err != nil && ctx.Err() == nil {
			c.log.Warn("dashboard: announcing this node failed; other nodes' dashboards miss its counts", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Peers returns the live nodes but this one, read from the store at most
// once every 5 seconds; none without a store. No caller waits on another's
// read of the store: while one reads, the others take the list read last.
func (c *Cluster) Peers(ctx context.Context) ([]string, error) {
	if c.store == nil {
		return nil, nil
	}
	c.mu.Lock()
	if time.Since(c.asked) < peersFresh || c.reading {
		list := c.list
		c.mu.Unlock()
		return list, nil
	}
	c.reading = true
	c.mu.Unlock()
	all, err := c.store.Nodes(ctx, time.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = false
	if err != nil {
		return nil, err
	}
	c.list = slices.DeleteFunc(all, func(n string) bool { return n == c.self })
	c.asked = time.Now()
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
