package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/httpapi"
)

// nodeList is a shared store's list of live nodes (dynamostore.Store).
type nodeList interface {
	Announce(ctx context.Context, node string, until time.Time) error
	Nodes(ctx context.Context, now time.Time) ([]string, error)
}

// How often a node announces itself, and how long an announcement lasts:
// a node gone is dropped from the dashboard's sums within announceTTL.
const (
	announceEvery = 5 * time.Second
	announceTTL   = 15 * time.Second
	peersFresh    = 5 * time.Second // how long a list of nodes is reused
)

// cluster is the dashboard's view of the other nodes of a shared store:
// it announces this node, lists the others, and asks them for their
// counts with the admin key the nodes share.
type cluster struct {
	self  string
	nodes nodeList
	peer  *peer
	log   *slog.Logger

	mu    sync.Mutex
	list  []string
	asked time.Time
}

var _ httpapi.Cluster = (*cluster)(nil)

// announce records this node as live every announceEvery until ctx ends.
func (c *cluster) announce(ctx context.Context) {
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, announceEvery)
		if err := c.nodes.Announce(actx, c.self, time.Now().Add(announceTTL)); err != nil && ctx.Err() == nil {
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

// Peers implements httpapi.Cluster: the live nodes but this one, read
// from the store at most once per peersFresh.
func (c *cluster) Peers(ctx context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.asked) < peersFresh {
		return c.list, nil
	}
	all, err := c.nodes.Nodes(ctx, time.Now())
	if err != nil {
		return nil, err
	}
	c.list = slices.DeleteFunc(all, func(n string) bool { return n == c.self })
	c.asked = time.Now()
	return c.list, nil
}

// Get implements httpapi.Cluster.
func (c *cluster) Get(ctx context.Context, node, pathAndQuery string) ([]byte, error) {
	path, query, _ := strings.Cut(pathAndQuery, "?")
	var body json.RawMessage
	if err := c.peer.do(ctx, http.MethodGet, node+path, query, nil, &body); err != nil {
		return nil, err
	}
	return body, nil
}
