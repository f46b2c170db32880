package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Cluster reaches the other nodes of a shared store, so that the dashboard
// shows the cluster, not one node: each node keeps what it decided, and
// the node a dashboard asks asks the others for theirs and sums them.
// Nothing of it goes through the store but the list of nodes.
type Cluster interface {
	// Peers returns the other live nodes' base URLs.
	Peers(ctx context.Context) ([]string, error)
	// Get asks node for pathAndQuery, answered by that node alone
	// (ForwardedHeader), and returns the body of its 200.
	Get(ctx context.Context, node, pathAndQuery string) ([]byte, error)
}

// peerTimeout bounds a peer's answer: a slow node is left out, and named.
const peerTimeout = 2 * time.Second

// gathered is what the other nodes answered: their bodies, who answered,
// and who did not.
type gathered struct {
	bodies  [][]byte
	nodes   []string
	missing []string
}

// gather asks every other node for pathAndQuery, at once, unless r is
// itself a peer's (a forwarded request is answered by this node alone).
func (h *Handler) gather(r *http.Request, pathAndQuery string) gathered {
	if !forward(r) {
		return gathered{nodes: []string{h.opts.Node}}
	}
	return h.gatherCtx(r.Context(), pathAndQuery, peerTimeout)
}

// gatherCtx asks every other node for pathAndQuery, at once, each for at
// most timeout.
func (h *Handler) gatherCtx(ctx context.Context, pathAndQuery string, timeout time.Duration) gathered {
	g := gathered{nodes: []string{h.opts.Node}}
	if h.opts.Cluster == nil {
		return g
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	peers, err := h.opts.Cluster.Peers(ctx)
	if err != nil {
		h.log.Warn("dashboard: listing the other nodes failed; showing this node's counts", "err", err)
		return g
	}
	bodies := make([][]byte, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			b, err := h.opts.Cluster.Get(ctx, p, pathAndQuery)
			if err != nil {
				h.log.Warn("dashboard: a node did not answer; its counts are missing", "node", p, "err", err)
				return
			}
			bodies[i] = b
		})
	}
	wg.Wait()
	for i, b := range bodies {
		if b == nil {
			g.missing = append(g.missing, peers[i])
			continue
		}
		g.nodes = append(g.nodes, peers[i])
		g.bodies = append(g.bodies, b)
	}
	return g
}

// decodeEach unmarshals each body into a new T, skipping those that are
// not one (logged).
func decodeEach[T any](h *Handler, bodies [][]byte) []T {
	out := make([]T, 0, len(bodies))
	for _, b := range bodies {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			h.log.Warn("dashboard: a node's answer is not understood", "err", err)
			continue
		}
		out = append(out, v)
	}
	return out
}
