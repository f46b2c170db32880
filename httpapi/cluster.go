package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/insight"
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

// sumSeries adds b's series into a, by name and second.
func sumSeries(a, b []series) []series {
	byName := map[string]int{}
	for i, s := range a {
		byName[s.Name] = i
	}
	for _, s := range b {
		i, ok := byName[s.Name]
		if !ok {
			byName[s.Name] = len(a)
			a = append(a, series{Name: s.Name})
			i = len(a) - 1
		}
		a[i].Points = sumPoints(a[i].Points, s.Points)
	}
	slices.SortFunc(a, func(x, y series) int { return cmp.Compare(x.Name, y.Name) })
	return a
}

// sumPoints adds b's counts into a's, second by second; nodes' clocks
// differ a little, so either may hold seconds the other has not.
func sumPoints(a, b []insight.Point) []insight.Point {
	return sumBySecond(a, b, func(p insight.Point) int64 { return p.Second },
		func(x *insight.Point, p insight.Point) {
			if x.Counts == nil {
				x.Second, x.Counts = p.Second, make([]int32, len(p.Counts))
			}
			for k := range min(len(x.Counts), len(p.Counts)) {
				x.Counts[k] += p.Counts[k]
			}
		})
}

// sumLatency adds b's store latencies into a's, by second, from their
// buckets.
func sumLatency(a, b []insight.LatencyPoint) []insight.LatencyPoint {
	return sumBySecond(a, b, func(p insight.LatencyPoint) int64 { return p.Second },
		func(x *insight.LatencyPoint, p insight.LatencyPoint) {
			buckets := slices.Clone(x.Buckets)
			if len(buckets) < len(p.Buckets) {
				buckets = append(buckets, make([]int32, len(p.Buckets)-len(buckets))...)
			}
			for k, c := range p.Buckets {
				buckets[k] += c
			}
			*x = insight.LatencyOf(p.Second, buckets)
		})
}

// sumBySecond adds each of b's points into a's point of the same second
// (a zero point if a has none), and sorts them by second.
func sumBySecond[T any](a, b []T, second func(T) int64, add func(*T, T)) []T {
	at := make(map[int64]int, len(a))
	for i, p := range a {
		at[second(p)] = i
	}
	for _, p := range b {
		i, ok := at[second(p)]
		if !ok {
			a = append(a, *new(T))
			i = len(a) - 1
			at[second(p)] = i
		}
		add(&a[i], p)
	}
	slices.SortFunc(a, func(x, y T) int { return cmp.Compare(second(x), second(y)) })
	return a
}

// sumTop merges nodes' heaviest keys: a key's counts and errors add up,
// as do the bounds; the n heaviest stay.
func sumTop(tops []insight.Top, n int) insight.Top {
	out := insight.Top{Hits: []insight.KeyCount{}, Denials: []insight.KeyCount{}}
	merge := func(lists [][]insight.KeyCount) []insight.KeyCount {
		idx := map[[2]string]int{}
		var all []insight.KeyCount
		for _, l := range lists {
			for _, k := range l {
				id := [2]string{k.Tenant, k.Key}
				if i, ok := idx[id]; ok {
					all[i].Count += k.Count
					all[i].Err += k.Err
					continue
				}
				idx[id] = len(all)
				all = append(all, k)
			}
		}
		slices.SortStableFunc(all, func(a, b insight.KeyCount) int { return cmp.Compare(b.Count, a.Count) })
		return append(out.Hits[:0:0], all[:min(n, len(all))]...)
	}
	var hits, denials [][]insight.KeyCount
	for _, t := range tops {
		out.Policy = t.Policy
		hits, denials = append(hits, t.Hits), append(denials, t.Denials)
		out.HitsBound += t.HitsBound
		out.DenialsBound += t.DenialsBound
	}
	out.Hits, out.Denials = merge(hits), merge(denials)
	return out
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
