package insight

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
)

// On a Zipf stream the sketch keeps every key heavier than Total/k, and
// each count is within its Err above the true weight, Err within the
// bound; the top keys come out in order.
func TestTopKGuarantees(t *testing.T) {
	for _, k := range []int{10, 50, 200} {
		t.Run(fmt.Sprint("k=", k), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(k)))
			z := rand.NewZipf(r, 1.2, 1, 5000)
			sk := NewTopK(k)
			truth := map[string]int64{}
			for range 200_000 {
				key := fmt.Sprint("u", z.Uint64())
				w := int64(1 + r.IntN(3))
				sk.Add(key, w, 0)
				truth[key] += w
			}
			var total int64
			for _, w := range truth {
				total += w
			}
			if sk.Total() != total {
				t.Fatalf("Total %d, want %d", sk.Total(), total)
			}
			bound := sk.Bound()
			top := sk.Top(k)
			kept := map[string]Item{}
			for i, it := range top {
				kept[it.Key] = it
				if i > 0 && it.Count > top[i-1].Count {
					t.Errorf("Top is not in order at %d: %v then %v", i, top[i-1], it)
				}
				w := truth[it.Key]
				if it.Count < w || it.Count-it.Err > w || it.Err > bound {
					t.Errorf("%s: count %d, error %d, true weight %d, bound %d", it.Key, it.Count, it.Err, w, bound)
				}
			}
			for key, w := range truth {
				if w > bound {
					if _, ok := kept[key]; !ok {
						t.Errorf("%s weighs %d, over the bound %d, and was not kept", key, w, bound)
					}
				}
			}
		})
	}
}

// A sketch keeps at most k keys, and an abusive key sent among many
// others comes out first.
func TestTopKFindsTheAbuser(t *testing.T) {
	sk := NewTopK(20)
	for i := range 100_000 {
		sk.Add(fmt.Sprint("k", i), 1, 0) // every key once
		if i%10 == 0 {
			sk.Add("abuser", 1, 0)
		}
	}
	if n := len(sk.idx); n != 20 {
		t.Errorf("%d keys kept, want 20", n)
	}
	if top := sk.Top(1); len(top) != 1 || top[0].Key != "abuser" || top[0].Count < 10_000 {
		t.Errorf("top %v, want the abuser with at least 10000", top)
	}
	if got := sk.Top(-1); len(got) != 0 {
		t.Errorf("Top(-1) = %v", got)
	}
}

func BenchmarkTopKAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 1_000_000)
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprint("u", z.Uint64())
	}
	sk := NewTopK(100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sk.Add(keys[i%len(keys)], 1, 0)
	}
}

// refTopK is TopK through container/heap, as it was first written.
type refTopK struct {
	k   int
	idx map[string]*entry
	h   refEntries
}

type refEntries []*entry

func (h refEntries) Len() int           { return len(h) }
func (h refEntries) Less(i, j int) bool { return entries(h).less(i, j) }
func (h refEntries) Swap(i, j int)      { entries(h).swap(i, j) }
func (h *refEntries) Push(x any) {
	e := x.(*entry)
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *refEntries) Pop() any { panic("unused") }

func (t *refTopK) add(key string, w int64) {
	if e, ok := t.idx[key]; ok {
		e.count += w
		heap.Fix(&t.h, e.pos)
		return
	}
	if len(t.h) < t.k {
		e := &entry{key: key, count: w}
		t.idx[key] = e
		heap.Push(&t.h, e)
		return
	}
	e := t.h[0]
	delete(t.idx, e.key)
	e.key, e.err, e.count = key, e.count, e.count+w
	t.idx[key] = e
	heap.Fix(&t.h, 0)
}

// TestTopKAsContainerHeap: the typed heap moves entries as container/heap
// did, so that a sketch keeps and evicts what it always has.
func TestTopKAsContainerHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(r, 1.2, 1, 500)
	sk, ref := NewTopK(20), &refTopK{k: 20, idx: map[string]*entry{}}
	for i := range 50_000 {
		key, w := fmt.Sprint("k", z.Uint64()), int64(1+r.IntN(3))
		sk.Add(key, w, 0)
		ref.add(key, w)
		if i%997 != 0 {
			continue
		}
		for j := range sk.h {
			if a, b := sk.h[j], ref.h[j]; a.key != b.key || a.count != b.count || a.err != b.err || a.pos != j {
				t.Fatalf("after %d adds, entry %d is %+v, container/heap's %+v", i+1, j, *a, *b)
			}
		}
	}
}

// Removing keys (a deleted tenant's) keeps every bound: a key that comes
// in after is counted from the greatest count dropped, so no count is
// under its key's weight, and none over by more than its Err.
func TestTopKRemoveKeepsBounds(t *testing.T) {
	sk := NewTopK(4)
	weight := map[string]int64{}
	add := func(key string, w int64) {
		sk.Add(key, w, 0)
		weight[key] += w
	}
	for i := range 40 {
		add(fmt.Sprint("a", i%6), int64(i%3+1))
	}
	sk.RemoveFunc(func(it Item) bool { return it.Key == "a1" || it.Key == "a2" })
	for _, it := range sk.Top(10) {
		if it.Key == "a1" || it.Key == "a2" {
			t.Fatalf("removed key %q still kept", it.Key)
		}
	}
	for i := range 30 {
		add(fmt.Sprint("b", i%3), 2)
		add("a1", 1)
	}
	for _, it := range sk.Top(10) {
		if it.Count < weight[it.Key] || it.Count-it.Err > weight[it.Key] {
			t.Errorf("%s: count %d, err %d, weight %d", it.Key, it.Count, it.Err, weight[it.Key])
		}
	}
	if len(sk.Top(10)) != 4 {
		t.Errorf("kept %d keys, want 4", len(sk.Top(10)))
	}
}
