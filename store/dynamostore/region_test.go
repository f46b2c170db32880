package dynamostore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// world is a global table over three regions, each its own dynoxide,
// copied by a replicator, with one store (a node) per region.
type world struct {
	regions []string
	stores  []*dynamostore.Store
	repl    *dynamotest.Replicator
}

func newWorld(t *testing.T, lag time.Duration) *world {
	t.Helper()
	w := &world{regions: []string{"us", "eu", "ap"}}
	table := dynamotest.TableName(t)
	var apis []dynamotest.ReplicaAPI
	for _, r := range w.regions {
		db := dynamotest.NewClient(dynamotest.StartOwn(t).Endpoint)
		if err := dynamostore.CreateTable(dynamotest.Context(t), db, table); err != nil {
			t.Fatal(err)
		}
		apis = append(apis, db)
		s, err := dynamostore.New(db, dynamostore.Options{Table: table, Region: r, Regions: w.regions, Rebalance: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		w.stores = append(w.stores, s)
	}
	w.repl = dynamotest.NewReplicator(table, apis, lag, 20*time.Millisecond)
	t.Cleanup(func() {
		if err := w.repl.Close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

// load sends each region's rate of single-hit decisions on one key of p
// for d, and returns what each region admitted in each of p's windows, by
// the window's start.
func (w *world) load(t *testing.T, p *sluice.Policy, rates []int, d time.Duration) []map[int64]int64 {
	t.Helper()
	admitted := make([]map[int64]int64, len(rates))
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i, rate := range rates {
		admitted[i] = map[int64]int64{}
		wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for now := range tick.C {
				if now.After(end) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				dst := []sluice.Decision{{}}
				err := w.stores[i].Apply(ctx, now, []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: p.Name, Algorithm: p.Algorithm, Value: "k"}, Policy: p, Hits: 1}}, dst)
				cancel()
				if err != nil {
					t.Errorf("region %s at %v: %v", w.regions[i], now, err)
					return
				}
				if dst[0].Allowed {
					start := now.UnixNano() - now.UnixNano()%int64(p.Window)
					mu.Lock()
					admitted[i][start]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return admitted
}

// windows returns the window starts seen, in order.
func windows(admitted []map[int64]int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, m := range admitted {
		for w := range m {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// Three regions share a global limit of 100 a second, with 80/15/5 of the
// demand, twice the limit, and replication 300ms behind: no window admits
// more than 100 across the regions, and the allotments follow the demand,
// so that the busy region gets most of the limit once they have moved.
func TestRegionsGlobalLimit(t *testing.T) {
	w := newWorld(t, 300*time.Millisecond)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	admitted := w.load(t, p, []int{160, 30, 10}, 6*time.Second)
	ws := windows(admitted)
	for _, start := range ws {
		var sum int64
		for i := range admitted {
			sum += admitted[i][start]
		}
		if sum > p.Limit {
			t.Errorf("window %v: %d admitted across the regions (%d, %d, %d), over the limit of %d",
				time.Unix(0, start).Format("15:04:05"), sum, admitted[0][start], admitted[1][start], admitted[2][start], p.Limit)
		}
	}
	// The last two whole windows: the busy region holds most of the limit.
	if len(ws) < 4 {
		t.Fatalf("only %d windows", len(ws))
	}
	for _, start := range ws[len(ws)-3 : len(ws)-1] {
		us, total := admitted[0][start], admitted[0][start]+admitted[1][start]+admitted[2][start]
		t.Logf("window %v: %d, %d, %d", time.Unix(0, start).Format("15:04:05"), admitted[0][start], admitted[1][start], admitted[2][start])
		if us < 60 || total < 85 {
			t.Errorf("window %v: the busy region admitted %d and all %d, want at least 60 and 85 once the allotments moved",
				time.Unix(0, start).Format("15:04:05"), us, total)
		}
	}
}

// A region cut off from the others keeps deciding within its allotment,
// and the others within theirs: no window admits more than the limit,
// though demand moves to another region meanwhile; once the cut heals,
// the allotments follow the demand again.
func TestRegionsPartition(t *testing.T) {
	w := newWorld(t, 200*time.Millisecond)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	check := func(phase string, admitted []map[int64]int64) {
		t.Helper()
		for _, start := range windows(admitted) {
			if sum := admitted[0][start] + admitted[1][start] + admitted[2][start]; sum > p.Limit {
				t.Errorf("%s, window %v: %d admitted across the regions (%d, %d, %d), over the limit of %d", phase,
					time.Unix(0, start).Format("15:04:05"), sum, admitted[0][start], admitted[1][start], admitted[2][start], p.Limit)
			}
		}
	}
	// The allotments move to us, where the demand is.
	before := w.load(t, p, []int{160, 30, 10}, 5*time.Second)
	check("before the cut", before)
	ws := windows(before)
	usHad := before[0][ws[len(ws)-2]]
	if usHad < 55 {
		t.Fatalf("us admitted %d in the last whole window before the cut, want most of the limit", usHad)
	}

	// us is cut off for 3s, and the demand moves to eu.
	w.repl.Cut(0, 3*time.Second)
	during := w.load(t, p, []int{10, 160, 30}, 3*time.Second)
	check("during the cut", during)
	for _, start := range windows(during) {
		if eu := during[1][start]; eu > p.Limit-usHad+5 {
			t.Errorf("during the cut, window %v: eu admitted %d, more than the %d us did not hold",
				time.Unix(0, start).Format("15:04:05"), eu, p.Limit-usHad)
		}
	}

	// Healed: us's units reach eu.
	after := w.load(t, p, []int{10, 160, 30}, 5*time.Second)
	check("after the cut", after)
	ws = windows(after)
	last := ws[len(ws)-2]
	t.Logf("before %v, after the cut's end: %d, %d, %d", usHad, after[0][last], after[1][last], after[2][last])
	if eu := after[1][last]; eu < 60 {
		t.Errorf("5s after the cut healed, eu admitted %d in a window, want most of the limit: the allotments did not follow the demand", eu)
	}
}
