package insight

import (
	"cmp"
	"slices"
)

// The sums of nodes' answers: each node of a shared store keeps what it
// decided, and the node a dashboard asks adds the others' to its own.

// NamedPoints is a label's counts per second by kind: a tenant's or a
// policy's, as a node tells them.
type NamedPoints struct {
	Name   string  `json:"name"`
	Points []Point `json:"points"`
}

// SumNamed adds b's series into a, by name and second, and sorts them by
// name.
func SumNamed(a, b []NamedPoints) []NamedPoints {
	byName := map[string]int{}
	for i, s := range a {
		byName[s.Name] = i
	}
	for _, s := range b {
		i, ok := byName[s.Name]
		if !ok {
			byName[s.Name] = len(a)
			a = append(a, NamedPoints{Name: s.Name})
			i = len(a) - 1
		}
		a[i].Points = SumPoints(a[i].Points, s.Points)
	}
	slices.SortFunc(a, func(x, y NamedPoints) int { return cmp.Compare(x.Name, y.Name) })
	return a
}

// SumPoints adds b's counts into a's, second by second; nodes' clocks
// differ a little, so either may hold seconds the other has not.
func SumPoints(a, b []Point) []Point {
	return sumBySecond(a, b, func(p Point) int64 { return p.Second },
		func(x *Point, p Point) {
			if x.Counts == nil {
				x.Second, x.Counts = p.Second, make([]int32, len(p.Counts))
			}
			for k := range min(len(x.Counts), len(p.Counts)) {
				x.Counts[k] += p.Counts[k]
			}
		})
}

// SumLatency adds b's store latencies into a's, by second, from their
// buckets.
func SumLatency(a, b []LatencyPoint) []LatencyPoint {
	return sumBySecond(a, b, func(p LatencyPoint) int64 { return p.Second },
		func(x *LatencyPoint, p LatencyPoint) {
			buckets := slices.Clone(x.Buckets)
			if len(buckets) < len(p.Buckets) {
				buckets = append(buckets, make([]int32, len(p.Buckets)-len(buckets))...)
			}
			for k, c := range p.Buckets {
				buckets[k] += c
			}
			*x = LatencyOf(p.Second, buckets)
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

// SumTop merges nodes' heaviest keys: a key's counts and errors add up,
// as do the bounds; the n heaviest stay.
func SumTop(tops []Top, n int) Top {
	out := Top{Hits: []KeyCount{}, Denials: []KeyCount{}}
	merge := func(lists [][]KeyCount) []KeyCount {
		idx := map[[2]string]int{}
		var all []KeyCount
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
		slices.SortStableFunc(all, func(a, b KeyCount) int { return cmp.Compare(b.Count, a.Count) })
		return append(out.Hits[:0:0], all[:min(n, len(all))]...)
	}
	var hits, denials [][]KeyCount
	for _, t := range tops {
		out.Policy = t.Policy
		hits, denials = append(hits, t.Hits), append(denials, t.Denials)
		out.HitsBound += t.HitsBound
		out.DenialsBound += t.DenialsBound
	}
	out.Hits, out.Denials = merge(hits), merge(denials)
	return out
}
