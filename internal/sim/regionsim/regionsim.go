// Package regionsim runs Sluice's multi-region limits against a faithful
// stand-in for a DynamoDB global table: one dynoxide server per region and
// a replicator (dynamotest.Replicator) that copies each item written in
// one region to the others after a lag, the last writer winning. Real
// stores (dynamostore in multi-region mode) decide real traffic on one key
// of a global fixed-window limit, skewed across the regions; the report
// gives, per window, what was admitted against the limit, the overshoot,
// increments lost to replication, and the decisions' p99 latency.
//
// The naive design, for comparison, is what seeds 003 and 004 describe:
// one item per key and window, incremented with ADD from every region,
// conditioned on the count read in the local replica.
package regionsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// Config is a run. Zero fields take the defaults stated.
type Config struct {
	Regions int           // 2 to 5; default 3
	Lag     time.Duration // replication lag; default 1s
	Skew    []int         // each region's part of the traffic, in percent; default 80/15/5 (or even); 0 for an idle region
	// Move, if not zero, moves the demand every Move: the skew turns by
	// one region (region i takes the part region i-1 had), so that with
	// 100/0/0 all of it goes from region to region.
	Move     time.Duration
	Duration time.Duration // default 60s
	Limit    int64         // the global limit per second; default 100
	Rate     int           // requests a second offered over all regions; default twice Limit
	Design   string        // "sluice" (default) or "naive"
	// Partition, if Cut is not zero, cuts region Cut-1 off for Cut from At
	// (default a quarter into the run).
	Partition struct {
		Region int // 1-based; 0: none
		For    time.Duration
		At     time.Duration
	}
	Rebalance time.Duration // Sluice's; default dynamostore.DefaultRebalance
	Dynoxide  string        // the emulator's path; default dynamotest.Find
}

// Window is one second of a run, over all regions.
type Window struct {
	At        float64 `json:"at_s"` // seconds into the run
	Admitted  int64   `json:"admitted"`
	ByRegion  []int64 `json:"by_region"`
	Overshoot float64 `json:"overshoot_pct"`
	Lost      int64   `json:"lost_increments"`
	P99Ms     float64 `json:"p99_ms"`
	Cut       bool    `json:"partitioned"`
}

// Span is the admitted fraction of the limit over SpanSeconds of a run.
type Span struct {
	At       float64 `json:"at_s"`
	Admitted int64   `json:"admitted"`
	Fraction float64 `json:"fraction"` // of the limit times the span's windows
}

// SpanSeconds is the length of a report's spans.
const SpanSeconds = 30

// Report is a run's result.
type Report struct {
	Design       string   `json:"design"`
	Regions      []string `json:"regions"`
	LagS         float64  `json:"lag_s"`
	RebalanceS   float64  `json:"rebalance_s"`
	Skew         []int    `json:"skew"`
	MoveS        float64  `json:"move_s,omitempty"`
	Limit        int64    `json:"limit"`
	Rate         int      `json:"rate"`
	Windows      []Window `json:"windows"`
	Over         int      `json:"windows_over"`
	MaxOvershoot float64  `json:"max_overshoot_pct"`
	Lost         int64    `json:"lost_increments"`
	P99Ms        float64  `json:"p99_ms"`
	Admitted     int64    `json:"admitted"`
	Utilisation  float64  `json:"utilisation"` // admitted over the limit times the windows
	Errors       int64    `json:"errors"`
	// Spans are the run's SpanSeconds, one after the other (a last shorter
	// one too), each with the fraction of the limit admitted; MinSpan is
	// the least fraction of a whole span (of the run if shorter).
	Spans   []Span  `json:"spans"`
	MinSpan float64 `json:"min_span_fraction"`
	// Follow is, for the start and each move of the demand, the seconds
	// until the first window that admitted at least 95% of the limit
	// (-1: none before the next move or the end).
	Follow []float64 `json:"follow_s"`
	// Decisions, Reads and Writes are a region's decisions asked, and
	// Sluice's requests to its store (dynamostore's Stats: reads and
	// writes, decisions' and allotments' alike), a second, averaged over
	// the regions and the run: what the period costs. Zero for the naive
	// design.
	Decisions float64 `json:"decisions_per_s,omitempty"`
	Reads     float64 `json:"store_reads_per_s,omitempty"`
	Writes    float64 `json:"store_writes_per_s,omitempty"`
}

// demand returns each region's requests a second at d into the run.
func (c Config) demand(d time.Duration) []int {
	k := 0
	if c.Move > 0 {
		k = int(d / c.Move)
	}
	out := make([]int, c.Regions)
	for r := range out {
		out[r] = c.Rate * c.Skew[((r-k)%c.Regions+c.Regions)%c.Regions] / 100
	}
	return out
}

func (c Config) withDefaults() Config {
	if c.Regions == 0 {
		c.Regions = 3
	}
	if c.Lag == 0 {
		c.Lag = time.Second
	}
	if len(c.Skew) == 0 {
		if c.Regions == 3 {
			c.Skew = []int{80, 15, 5}
		} else {
			for i := range c.Regions {
				c.Skew = append(c.Skew, 100/c.Regions+btoi(i < 100%c.Regions))
			}
		}
	}
	if c.Duration == 0 {
		c.Duration = 60 * time.Second
	}
	if c.Limit == 0 {
		c.Limit = 100
	}
	if c.Rate == 0 {
		c.Rate = int(2 * c.Limit)
	}
	if c.Design == "" {
		c.Design = "sluice"
	}
	if c.Partition.Region != 0 && c.Partition.At == 0 {
		c.Partition.At = c.Duration / 4
	}
	if c.Rebalance == 0 {
		c.Rebalance = dynamostore.DefaultRebalance
	}
	return c
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Validate reports the first bad field by name.
func (c Config) Validate() error {
	c = c.withDefaults()
	sum := 0
	for _, s := range c.Skew {
		if s < 0 {
			return fmt.Errorf("regionsim: skew %v: parts must be positive", c.Skew)
		}
		sum += s
	}
	switch {
	case c.Regions < 2 || c.Regions > 5:
		return fmt.Errorf("regionsim: regions %d must be 2 to 5", c.Regions)
	case c.Lag < 0 || c.Lag > time.Minute:
		return fmt.Errorf("regionsim: lag %v must be 0 to 1m", c.Lag)
	case len(c.Skew) != c.Regions || sum != 100:
		return fmt.Errorf("regionsim: skew %v must have one part per region (%d), summing to 100", c.Skew, c.Regions)
	case c.Duration < 2*time.Second || c.Duration > 10*time.Minute:
		return fmt.Errorf("regionsim: duration %v must be 2s to 10m", c.Duration)
	case c.Limit < 1 || c.Limit > 10_000:
		return fmt.Errorf("regionsim: limit %d must be 1 to 10000", c.Limit)
	case c.Rate < 1 || c.Rate > 20_000:
		return fmt.Errorf("regionsim: rate %d must be 1 to 20000 a second", c.Rate)
	case c.Move != 0 && (c.Move < time.Second || c.Move > c.Duration || c.Move%time.Second != 0):
		return fmt.Errorf("regionsim: move %v must be whole seconds, 1s to the run's duration (%v)", c.Move, c.Duration)
	case c.Design != "sluice" && c.Design != "naive":
		return fmt.Errorf("regionsim: design %q must be sluice or naive", c.Design)
	case c.Partition.Region < 0 || c.Partition.Region > c.Regions:
		return fmt.Errorf("regionsim: partition region %d must be 1 to %d", c.Partition.Region, c.Regions)
	case c.Partition.Region > 0 && (c.Partition.For <= 0 || c.Partition.At+c.Partition.For > c.Duration):
		return fmt.Errorf("regionsim: partition of %v from %v must end within the run (%v)", c.Partition.For, c.Partition.At, c.Duration)
	}
	return nil
}

// deciderFunc decides one request of region r at now: admitted or not,
// and the start of the window it was counted in.
type deciderFunc func(ctx context.Context, r int, now time.Time) (bool, time.Time, error)

// Run runs cfg and reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	bin := cfg.Dynoxide
	if bin == "" {
		var err error
		if bin, err = dynamotest.Find(); err != nil {
			return nil, fmt.Errorf("regionsim: %w (or pass its path)", err)
		}
	}
	names := []string{"r1", "r2", "r3", "r4", "r5"}[:cfg.Regions]
	table := "sluice_regions"
	var (
		dbs     []*dynamodb.Client
		apis    []dynamotest.ReplicaAPI
		servers []*dynamotest.Server
	)
	defer func() {
		for _, s := range servers {
			s.Stop()
		}
	}()
	for range names {
		s, err := dynamotest.Start(bin)
		if err != nil {
			return nil, fmt.Errorf("regionsim: %w", err)
		}
		servers = append(servers, s)
		db := dynamotest.NewClient(s.Endpoint)
		if err := dynamostore.CreateTable(ctx, db, table); err != nil {
			return nil, fmt.Errorf("regionsim: %w", err)
		}
		dbs, apis = append(dbs, db), append(apis, db)
	}
	repl := dynamotest.NewReplicator(table, apis, cfg.Lag, 0)
	defer repl.Close()

	policy := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: cfg.Limit, Window: time.Second, FailMode: sluice.FailClosed}
	var (
		decide deciderFunc
		stores []*dynamostore.Store
	)
	switch cfg.Design {
	case "sluice":
		var engines []*engine.Engine
		stores = nil
		for _, r := range names {
			s, err := dynamostore.New(dbs[slices.Index(names, r)], dynamostore.Options{Table: table, Region: r, Regions: names, Rebalance: cfg.Rebalance})
			if err != nil {
				return nil, err
			}
			defer s.Close()
			stores = append(stores, s)
			engines = append(engines, engine.New(s, engine.Options{}))
		}
		decide = func(ctx context.Context, r int, now time.Time) (bool, time.Time, error) {
			res, err := engines[r].Check(ctx, sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: *policy, Key: "k"}}})
			if err != nil {
				return false, time.Time{}, err
			}
			d := res.Decisions[0]
			if d.FailedClosed {
				return false, time.Time{}, errors.New("the store could not decide")
			}
			// The engine decides on its own clock: the window is the one
			// the decision names, ending at its reset.
			return res.Allowed, d.ResetAt.Add(-policy.Window), nil
		}
	case "naive":
		decide = func(ctx context.Context, r int, now time.Time) (bool, time.Time, error) {
			ok, err := naiveDecide(ctx, dbs[r], table, cfg.Limit, now)
			return ok, now.Truncate(time.Second), err
		}
	}

	rep := &Report{Design: cfg.Design, Regions: names, LagS: cfg.Lag.Seconds(), RebalanceS: cfg.Rebalance.Seconds(),
		Skew: cfg.Skew, MoveS: cfg.Move.Seconds(), Limit: cfg.Limit, Rate: cfg.Rate}
	begin := time.Now().Truncate(time.Second).Add(time.Second) // whole windows
	end := begin.Add(cfg.Duration)
	nw := int(cfg.Duration / time.Second)
	admitted := make([][]int64, len(names))
	lat := make([][]time.Duration, nw)
	for i := range admitted {
		admitted[i] = make([]int64, nw)
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		errs   int64
		asked  int64
		cutErr error
	)
	if cfg.Partition.Region > 0 {
		wg.Go(func() {
			t := time.NewTimer(time.Until(begin.Add(cfg.Partition.At)))
			defer t.Stop()
			select {
			case <-ctx.Done():
			case <-t.C:
				repl.Cut(cfg.Partition.Region-1, cfg.Partition.For)
			}
		})
	}
	for r := range names {
		wg.Go(func() {
			time.Sleep(time.Until(begin))
			// A tick every 1/Rate; the region asks on the ticks its share
			// of the demand, at the moment, adds up to a whole request.
			tick := time.NewTicker(time.Second / time.Duration(cfg.Rate))
			defer tick.Stop()
			var owed float64
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-tick.C:
					if !now.Before(end) {
						return
					}
					if owed += float64(cfg.demand(now.Sub(begin))[r]) / float64(cfg.Rate); owed < 1 {
						continue
					}
					owed--
					mu.Lock()
					asked++
					mu.Unlock()
					dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					t0 := time.Now()
					ok, win, err := decide(dctx, r, now)
					took := time.Since(t0)
					cancel()
					w := int(now.Sub(begin) / time.Second)
					if ok {
						w = int(win.Sub(begin) / time.Second)
					}
					mu.Lock()
					if err != nil {
						errs++
						if cutErr == nil {
							cutErr = fmt.Errorf("region %s: %w", names[r], err)
						}
					} else if w >= 0 && w < nw {
						lat[w] = append(lat[w], took)
						if ok {
							admitted[r][w]++
						}
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := repl.Sync(ctx); err != nil {
		return nil, err
	}
	rep.Errors = errs
	if len(stores) > 0 {
		per := float64(len(stores)) * cfg.Duration.Seconds()
		for _, st := range stores {
			ss := st.Stats()
			rep.Reads += float64(ss.Reads) / per
			rep.Writes += float64(ss.Writes) / per
		}
		rep.Decisions = float64(asked) / per
	}
	var lost []int64
	if cfg.Design == "naive" {
		var err error
		if lost, err = naiveLost(ctx, dbs, table, begin, nw, admitted); err != nil {
			return nil, err
		}
	} else {
		var err error
		if lost, err = overwritten(ctx, apis, table, names, nw); err != nil {
			return nil, err
		}
	}
	var all []time.Duration
	for w := range nw {
		win := Window{At: float64(w), ByRegion: make([]int64, len(names)), Lost: lost[w]}
		for r := range names {
			win.ByRegion[r] = admitted[r][w]
			win.Admitted += admitted[r][w]
		}
		if win.Admitted > cfg.Limit {
			win.Overshoot = 100 * float64(win.Admitted-cfg.Limit) / float64(cfg.Limit)
			rep.Over++
		}
		rep.MaxOvershoot = max(rep.MaxOvershoot, win.Overshoot)
		win.P99Ms = p99(lat[w])
		at := time.Duration(w) * time.Second
		win.Cut = cfg.Partition.Region > 0 && at+time.Second > cfg.Partition.At && at < cfg.Partition.At+cfg.Partition.For
		rep.Windows = append(rep.Windows, win)
		rep.Lost += win.Lost
		rep.Admitted += win.Admitted
		all = append(all, lat[w]...)
	}
	rep.P99Ms = p99(all)
	rep.Utilisation = float64(rep.Admitted) / float64(cfg.Limit*int64(nw))
	rep.spans(cfg)
	return rep, nil
}

// spans fills in r's spans and follow times from its windows.
func (r *Report) spans(cfg Config) {
	r.MinSpan = -1
	for at := 0; at < len(r.Windows); at += SpanSeconds {
		sp := Span{At: float64(at)}
		n := min(SpanSeconds, len(r.Windows)-at)
		for _, w := range r.Windows[at : at+n] {
			sp.Admitted += w.Admitted
		}
		sp.Fraction = float64(sp.Admitted) / float64(cfg.Limit*int64(n))
		if n == SpanSeconds || at == 0 {
			if r.MinSpan < 0 || sp.Fraction < r.MinSpan {
				r.MinSpan = sp.Fraction
			}
		}
		r.Spans = append(r.Spans, sp)
	}
	every := len(r.Windows)
	if cfg.Move > 0 {
		every = int(cfg.Move / time.Second)
	}
	for at := 0; at < len(r.Windows); at += every {
		f := -1.0
		for i := at; i < min(at+every, len(r.Windows)); i++ {
			if float64(r.Windows[i].Admitted) >= 0.95*float64(cfg.Limit) {
				f = float64(i - at)
				break
			}
		}
		r.Follow = append(r.Follow, f)
	}
}

func p99(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return float64(ds[(len(ds)*99)/100]) / float64(time.Millisecond)
}

// naiveDecide is the naive design's decision: ADD 1 to the key's item of
// the window in the local replica, if the count there is under the limit.
func naiveDecide(ctx context.Context, db *dynamodb.Client, table string, limit int64, now time.Time) (bool, error) {
	w := now.Truncate(time.Second).Unix()
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &table,
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "acme#naive#k#" + strconv.FormatInt(w, 10)},
			"sk": &types.AttributeValueMemberS{Value: "c"},
		},
		UpdateExpression:          aws.String("ADD n :one"),
		ConditionExpression:       aws.String("attribute_not_exists(n) OR n < :limit"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}, ":limit": &types.AttributeValueMemberN{Value: strconv.FormatInt(limit, 10)}},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return false, nil
	}
	return err == nil, err
}

// naiveLost returns, per window, the increments admitted that no replica's
// count holds once replication has settled: admitted less the count.
func naiveLost(ctx context.Context, dbs []*dynamodb.Client, table string, begin time.Time, nw int, admitted [][]int64) ([]int64, error) {
	lost := make([]int64, nw)
	for w := range nw {
		var sum int64
		for r := range admitted {
			sum += admitted[r][w]
		}
		out, err := dbs[0].GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true), Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "acme#naive#k#" + strconv.FormatInt(begin.Add(time.Duration(w)*time.Second).Unix(), 10)},
			"sk": &types.AttributeValueMemberS{Value: "c"},
		}})
		if err != nil {
			return nil, err
		}
		var n int64
		if v, ok := out.Item["n"].(*types.AttributeValueMemberN); ok {
			n, _ = strconv.ParseInt(v.Value, 10, 64)
		}
		lost[w] = max(sum-n, 0)
	}
	return lost, nil
}

// overwritten counts, for Sluice's design, the counter items that some
// replica holds otherwise than their home region does once replication
// has settled: an increment lost to another region's write. Each counter
// item is written by its region alone, so there are none; this checks it.
// Sluice's counters hold their windows inside one item per region, so a
// difference is charged to the last window.
func overwritten(ctx context.Context, apis []dynamotest.ReplicaAPI, table string, names []string, nw int) ([]int64, error) {
	lost := make([]int64, nw)
	home := map[string]map[string]types.AttributeValue{}
	var all [][]map[string]types.AttributeValue
	for i, db := range apis {
		items, err := dynamotest.ScanAll(ctx, db, table)
		if err != nil {
			return nil, err
		}
		all = append(all, items)
		for _, it := range items {
			pk := it["pk"].(*types.AttributeValueMemberS).Value
			if strings.HasSuffix(pk, "#r:"+names[i]) {
				home[pk] = it
			}
		}
	}
	for _, items := range all {
		for _, it := range items {
			pk := it["pk"].(*types.AttributeValueMemberS).Value
			h, ok := home[pk]
			if !ok || !strings.Contains(pk, "#r:") {
				continue
			}
			if fmt.Sprint(h["v"]) != fmt.Sprint(it["v"]) {
				lost[nw-1]++
			}
		}
	}
	return lost, nil
}
