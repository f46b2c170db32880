package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
	"github.com/sluicehq/sluice/wire"
)

// harshTenant is a tenant of TestUpstreamHarshAcrossNodes: its weight on
// the upstream, the keys its requests name in turn, their cost and
// maxWait (0: the upstream's), and the requests it sends a second in each
// phase of the run, evenly spaced or, if poisson, at random.
type harshTenant struct {
	name, class string
	weight      float64
	keys        int
	cost        int
	maxWait     time.Duration
	rate        [2]float64
	poisson     bool
}

// harshTenants is the workload: two groups of five tenants, a and b,
// with weights 4, 2 and 1, one of weight 2 naming 20 keys and one of
// weight 2 sending cost-5 requests, these two with a maxWait of 500 ms;
// group a asks about twice its share in the first phase and once a
// second in the second, group b the other way about. Ten light tenants of
// weight 1 ask once a second at random (Poisson) throughout, with a
// maxWait of 300 ms.
func harshTenants() []harshTenant {
	var ts []harshTenant
	for g, group := range []string{"a", "b"} {
		phase := func(heavy float64) [2]float64 {
			r := [2]float64{1, 1}
			r[g] = heavy
			return r
		}
		ts = append(ts,
			harshTenant{name: group + "4", class: "weight 4", weight: 4, keys: 1, cost: 1, rate: phase(100)},
			harshTenant{name: group + "2", class: "weight 2", weight: 2, keys: 1, cost: 1, rate: phase(50)},
			harshTenant{name: group + "1", class: "weight 1", weight: 1, keys: 1, cost: 1, rate: phase(30)},
			harshTenant{name: group + "keys", class: "20 keys", weight: 2, keys: 20, cost: 1, maxWait: 500 * time.Millisecond, rate: phase(60)},
			harshTenant{name: group + "cost", class: "cost 5", weight: 2, keys: 1, cost: 5, maxWait: 500 * time.Millisecond, rate: phase(10)},
		)
	}
	for i := range 10 {
		ts = append(ts, harshTenant{name: fmt.Sprintf("l%d", i), class: "light", weight: 1, keys: 1, cost: 1, maxWait: 300 * time.Millisecond, rate: [2]float64{1, 1}, poisson: true})
	}
	return ts
}

// TestUpstreamHarshAcrossNodes: three nodes on one DynamoDB table
// (dynoxide) share an upstream of 150 cost units a second, over HTTP,
// under a harsh workload (harshTenants): weights 4/2/1 set in the
// upstream's configuration, a tenant naming 20 keys, cost-5 requests,
// short waits, and the heavy demand moving from one group of tenants to
// the other halfway. Each tenant sends to one node (tenant i to node
// i%3), so the nodes' heavy weights move too, 6/4/1 to 4/1/6.
//
// Asserted: (1) never more than 150 units granted in any sliding second,
// by the grant times the servers answer, exactly; (2) in each phase, once
// the shares have settled, each heavy tenant (each weight class, the
// 20-key tenant, the cost-5 tenant) is granted its weighted max-min share
// of cost units, less 15% to more 15% (to twice it for its node's only
// heavy tenant, below); (3) the light customers' requests sent after the
// first settling are granted, not refused or withdrawn, for at least 75%
// of them, and 90% of those sent to a node whose tenants' shares sum to
// 50 a second or more.
//
// The bounds are what the design gives on three nodes, measured on a
// loaded two-core machine with and without the race detector (worst
// seen: -11.8% of a share; light customers 83.8% granted, 97.3% on the
// larger nodes), not the simulator's targets. Two shortfalls are bounded,
// not hidden: a node whose heavy weight is small (here one tenant of
// weight 1, holding about 17 to 27 units a second) refuses its light
// customers' 300 ms requests at once 15 to 35% of the time, and its heavy
// tenant takes what they leave and what its node holds for tenants
// counted heavy for a step (the node's share swung from 22 to 42, it
// seems when its light cost-5 tenant did): up to 77% over its share. That
// light cost-5 tenant, with its 500 ms wait, gets a fifth to a half of
// what it asks; logged, not asserted.
func TestUpstreamHarshAcrossNodes(t *testing.T) {
	const (
		rate = 150
		// A heavy tenant gets at least 1-below of its share, and at
		// most 1+above, or 1+aboveAlone if it is its node's only heavy
		// tenant (above).
		below, above, aboveAlone = 0.15, 0.15, 1.00
		// The light customers' requests granted: of all, and of those
		// sent to a node whose tenants' shares sum to bigNode or more.
		lightServed, lightServedBig, bigNode = 0.75, 0.90, 50
	)
	tenants := harshTenants()
	nodeOf := map[string]int{}
	for i, tn := range tenants {
		nodeOf[tn.name] = i % 3
	}
	// alone reports whether tenant i is its node's only heavy tenant in
	// phase p.
	alone := func(i, p int) bool {
		for j, tn := range tenants {
			if j != i && j%3 == i%3 && tn.rate[p] > 1 {
				return false
			}
		}
		return true
	}
	table := dynamotest.TableName(t)
	if err := dynamostore.CreateTable(dynamotest.Context(t), dynamotest.NewClient(dynamotest.Get(t).Endpoint), table); err != nil {
		t.Fatal(err)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "defaults:\n  timeout: 2s\nupstreams:\n  partner:\n    rate: %d\n    window: 1s\n    maxWait: 2s\n    weights:\n      tenants:\n", rate)
	for _, tn := range tenants {
		if tn.weight != 1 {
			fmt.Fprintf(&conf, "        %s: %v\n", tn.name, tn.weight)
		}
	}
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ps := make([]*process, 3)
	for i := range ps {
		ps[i] = start(t, "--store", "dynamodb", "--dynamodb-endpoint", dynamotest.Get(t).Endpoint, "--dynamodb-table", table, "--config", file)
	}

	// The phases: each settles for its first settle[p], then is measured
	// to its end. The load goes on a second past the last, so that no
	// tenant's demand falls inside a measured window.
	var (
		phaseLen = 18 * time.Second
		settle   = [2]time.Duration{6 * time.Second, 4 * time.Second}
	)
	type grant struct {
		tenant, key string
		cost        int
		at          time.Time
		waited      time.Duration
	}
	type outcome struct{ granted, refusedAtOnce, refusedLater, failed int }
	var (
		mu     sync.Mutex
		grants []grant
		light  = map[string]*[2]outcome{} // by the phase a request was sent in
	)
	began := time.Now()
	phaseAt := func(at time.Time) int {
		if at.Sub(began) < phaseLen {
			return 0
		}
		return 1
	}
	for _, tn := range tenants {
		if tn.class == "light" {
			light[tn.name] = &[2]outcome{}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	for i, tn := range tenants {
		url := "http://" + ps[i%3].addr + "/v1/upstreams/partner/acquire"
		rng := rand.New(rand.NewPCG(24, uint64(i)))
		wg.Go(func() {
			// Open loop: requests at the phase's rate, each in its own
			// goroutine, at most 64 of the tenant's at once (past that,
			// a request is not sent).
			slots := make(chan struct{}, 64)
			timer := time.NewTimer(0)
			defer timer.Stop()
			next := time.Now()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				gap := 1 / tn.rate[phaseAt(next)]
				if tn.poisson {
					gap *= rng.ExpFloat64()
				}
				next = next.Add(time.Duration(gap * float64(time.Second)))
				timer.Reset(time.Until(next))
				select {
				case slots <- struct{}{}:
				default:
					continue
				}
				key := fmt.Sprintf("k%d", n%tn.keys)
				req := wire.AcquireRequest{Tenant: tn.name, Key: key}
				if tn.cost != 1 {
					c := int64(tn.cost)
					req.Cost = &c
				}
				if tn.maxWait > 0 {
					req.MaxWait = &wire.Duration{D: tn.maxWait}
				}
				body, err := json.Marshal(req)
				if err != nil {
					t.Error(err)
					return
				}
				wg.Go(func() {
					defer func() { <-slots }()
					sent := time.Now()
					resp, err := hc.Post(url, "application/json", strings.NewReader(string(body)))
					var out wire.AcquireResponse
					if err == nil {
						err = json.NewDecoder(resp.Body).Decode(&out)
						resp.Body.Close()
					}
					mu.Lock()
					defer mu.Unlock()
					var o *outcome
					if byPhase := light[tn.name]; byPhase != nil {
						o = &byPhase[phaseAt(sent)]
					}
					counted := o != nil && sent.Sub(began) >= settle[0]
					switch {
					case err != nil || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests):
						if counted {
							o.failed++
						}
					case resp.StatusCode == http.StatusTooManyRequests:
						// Refused at arrival, or withdrawn at its maxWait:
						// told apart by how long the answer took.
						if counted && time.Since(sent) < max(tn.maxWait, 2*time.Second)/2 {
							o.refusedAtOnce++
						} else if counted {
							o.refusedLater++
						}
					case !out.Granted || out.GrantedAt.IsZero():
						t.Errorf("a grant for %s: %+v; want granted with its time", tn.name, out)
					default:
						if counted {
							o.granted++
						}
						grants = append(grants, grant{tenant: tn.name, key: key, cost: tn.cost, at: out.GrantedAt, waited: out.Waited.D})
					}
				})
			}
		})
	}
	// Each node's share, sampled every 250 ms, for the log.
	type sample struct {
		at    time.Time
		share [3]float64
	}
	var samples []sample
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s := sample{at: time.Now()}
			for n, p := range ps {
				var st struct {
					State struct{ Share float64 } `json:"state"`
				}
				if body, err := httpGet("http://" + p.addr + "/v1/upstreams/partner"); err == nil && json.Unmarshal([]byte(body), &st) == nil {
					s.share[n] = st.State.Share
				}
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}
	})
	time.Sleep(2*phaseLen + time.Second)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	// (1) Never more than the rate in any sliding second, in cost units.
	var units []time.Time
	for _, g := range grants {
		for range g.cost {
			units = append(units, g.at)
		}
	}
	most := mostInWindow(units, time.Second)
	if most > rate {
		t.Errorf("%d units granted in one sliding second, more than the rate of %d", most, rate)
	}

	// (2) Each phase's weighted max-min shares, in cost units a second.
	var wantNode [2][3]float64 // the sum of each node's tenants' shares
	for p := range 2 {
		from := began.Add(time.Duration(p)*phaseLen + settle[p])
		to := began.Add(time.Duration(p+1) * phaseLen)
		secs := to.Sub(from).Seconds()
		demand, weight := make([]float64, len(tenants)), make([]float64, len(tenants))
		for i, tn := range tenants {
			demand[i], weight[i] = tn.rate[p]*float64(tn.cost), tn.weight
		}
		share := weightedWaterFill(demand, weight, rate)
		got := map[string]float64{}
		perKey := map[string]int{}
		total := 0.0
		var nodeUnits [3][]time.Time // each node's units by grant time, to see how evenly it releases
		for _, g := range grants {
			if !g.at.Before(from) && g.at.Before(to) {
				for range g.cost {
					nodeUnits[nodeOf[g.tenant]] = append(nodeUnits[nodeOf[g.tenant]], g.at)
				}
				got[g.tenant] += float64(g.cost)
				total += float64(g.cost)
				if g.tenant == tenants[5*p+3].name {
					perKey[g.key]++
				}
			}
		}
		var (
			lines    []string
			sum, sq  float64
			worst    float64
			worstIs  string
			lightGot float64
			lightAsk float64
		)
		for i, tn := range tenants {
			x := got[tn.name] / (share[i] * secs)
			sum, sq = sum+x, sq+x*x
			if tn.class == "light" {
				lightGot, lightAsk = lightGot+got[tn.name], lightAsk+share[i]*secs
				continue
			}
			lines = append(lines, fmt.Sprintf("%s (%s) %.1f/s of %.1f (%+.1f%%)", tn.name, tn.class, got[tn.name]/secs, share[i], 100*(x-1)))
			if tn.rate[p] <= 1 {
				continue // asks less than its share: logged, not asserted
			}
			if d := math.Abs(x - 1); d > worst {
				worst, worstIs = d, tn.name+" ("+tn.class+")"
			}
			up := above
			if alone(i, p) {
				up = aboveAlone
			}
			if x < 1-below || x > 1+up {
				t.Errorf("phase %d: %s (%s, weight %v) was granted %.1f units a second from %v to %v, want %.1f, its weighted max-min share, less %.0f%% to more %.0f%%",
					p+1, tn.name, tn.class, tn.weight, got[tn.name]/secs, from.Sub(began), to.Sub(began), share[i], 100*below, 100*up)
			}
		}
		var nodeShare, lo, hi [3]float64
		lo = [3]float64{rate, rate, rate}
		n := 0
		for _, s := range samples {
			if !s.at.Before(from) && s.at.Before(to) {
				for k := range nodeShare {
					nodeShare[k] += s.share[k]
					lo[k], hi[k] = min(lo[k], s.share[k]), max(hi[k], s.share[k])
				}
				n++
			}
		}
		want := &wantNode[p]
		for i := range tenants {
			want[i%3] += share[i]
		}
		for k := range nodeShare {
			nodeShare[k] /= float64(max(n, 1))
		}
		keys := make([]int, tenants[5*p+3].keys)
		for k := range keys {
			keys[k] = perKey[fmt.Sprintf("k%d", k)]
		}
		t.Logf("phase %d (%v to %v): %.1f units a second granted, %.1f%% of the rate; Jain %.3f over every tenant's grant over its share; heavy tenants furthest from their shares by %.1f%% (%s); light tenants %.1f/s of %.1f asked; %s; the 20-key tenant's keys %d to %d grants each; the nodes' shares %.1f (%.0f to %.0f), %.1f (%.0f to %.0f) and %.1f (%.0f to %.0f) on average, their tenants' fair shares %.1f, %.1f and %.1f; most units granted in a sliding 100 ms %d, %d and %d",
			p+1, from.Sub(began), to.Sub(began), total/secs, 100*total/secs/rate, sum*sum/(float64(len(tenants))*sq), 100*worst, worstIs,
			lightGot/secs, lightAsk/secs, strings.Join(lines, ", "), slices.Min(keys), slices.Max(keys), nodeShare[0], lo[0], hi[0], nodeShare[1], lo[1], hi[1], nodeShare[2], lo[2], hi[2], want[0], want[1], want[2],
			mostInWindow(nodeUnits[0], 100*time.Millisecond), mostInWindow(nodeUnits[1], 100*time.Millisecond), mostInWindow(nodeUnits[2], 100*time.Millisecond))
	}

	// (3) The light customers' requests are granted.
	var all, big outcome
	var waits []time.Duration
	for _, g := range grants {
		if o := light[g.tenant]; o != nil && g.at.Sub(began) >= settle[0] {
			waits = append(waits, g.waited)
		}
	}
	var each []string
	for i, tn := range tenants {
		byPhase := light[tn.name]
		if byPhase == nil {
			continue
		}
		for p, o := range byPhase {
			if wantNode[p][i%3] >= bigNode {
				big.granted, big.refusedAtOnce, big.refusedLater, big.failed = big.granted+o.granted, big.refusedAtOnce+o.refusedAtOnce, big.refusedLater+o.refusedLater, big.failed+o.failed
			}
			all.granted, all.refusedAtOnce, all.refusedLater, all.failed = all.granted+o.granted, all.refusedAtOnce+o.refusedAtOnce, all.refusedLater+o.refusedLater, all.failed+o.failed
			each = append(each, fmt.Sprintf("%s on node %d in phase %d %d of %d", tn.name, i%3, p+1, o.granted, o.granted+o.refusedAtOnce+o.refusedLater+o.failed))
		}
	}
	sent := all.granted + all.refusedAtOnce + all.refusedLater + all.failed
	slices.SortFunc(waits, cmp.Compare)
	p99 := time.Duration(0)
	if len(waits) > 0 {
		p99 = waits[len(waits)*99/100]
	}
	t.Logf("light customers (maxWait 300ms), from %v on: %d requests, %d granted (%.1f%%), %d refused at once, %d refused after waiting, %d failed; waited at the 99th percentile %v; most units granted in a sliding second %d (rate %d); granted: %s",
		settle[0], sent, all.granted, 100*float64(all.granted)/float64(max(sent, 1)), all.refusedAtOnce, all.refusedLater, all.failed, p99, most, rate, strings.Join(each, ", "))
	if sent == 0 || float64(all.granted) < lightServed*float64(sent) {
		t.Errorf("the light customers were granted %d of %d requests, want at least %.0f%%", all.granted, sent, 100*lightServed)
	}
	bigSent := big.granted + big.refusedAtOnce + big.refusedLater + big.failed
	t.Logf("light customers on a node whose tenants' shares sum to %d or more: %d of %d granted (%.1f%%)", bigNode, big.granted, bigSent, 100*float64(big.granted)/float64(max(bigSent, 1)))
	if bigSent == 0 || float64(big.granted) < lightServedBig*float64(bigSent) {
		t.Errorf("the light customers on a node whose tenants' shares sum to %d or more were granted %d of %d requests, want at least %.0f%%", bigNode, big.granted, bigSent, 100*lightServedBig)
	}
	if t.Failed() {
		for _, p := range ps {
			st, _ := httpGet("http://" + p.addr + "/v1/upstreams/partner")
			t.Logf("node %s: %s", p.addr, st)
		}
	}
}

// weightedWaterFill returns each demand's weighted max-min share of
// capacity: the level l at which each gets min(demand, weight*l) and the
// shares sum to capacity (or every demand is met).
func weightedWaterFill(demand, weight []float64, capacity float64) []float64 {
	idx := make([]int, len(demand))
	var left, weights float64 = capacity, 0
	for i := range idx {
		idx[i] = i
		weights += weight[i]
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(demand[a]/weight[a], demand[b]/weight[b]) })
	share := make([]float64, len(demand))
	for _, i := range idx {
		share[i] = min(demand[i], weight[i]*left/weights)
		left -= share[i]
		weights -= weight[i]
	}
	return share
}
