package insight

import (
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
				sk.Add(key, w)
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
		sk.Add(fmt.Sprint("k", i), 1) // every key once
		if i%10 == 0 {
			sk.Add("abuser", 1)
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
		sk.Add(keys[i%len(keys)], 1)
	}
}
