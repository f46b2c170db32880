package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ReplicaAPI is what a Replicator needs of each region's DynamoDB.
type ReplicaAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// Replicator copies one table between regions as DynamoDB global tables
// do, for tests and simulations: each region is its own server (a
// dynoxide), and every item written in one region reaches the others
// after Lag, item by item, the last writer winning. It finds writes by
// scanning each region every Poll and comparing with what it saw last, so
// a write's time is when it was found (within a Poll of when it landed);
// of two writes of one item in two regions, the later found wins in every
// region, and the other is lost, as in a global table. Items are never
// deleted (Sluice's expire by their own state). A region cut off (Cut)
// neither sends nor receives until the cut ends; its writes and the
// others' are delivered then.
//
// It scans whole tables: it is for tables of a few thousand items.
type Replicator struct {
	table   string
	regions []ReplicaAPI
	lag     time.Duration
	poll    time.Duration
	now     func() time.Time

	cycle   sync.Mutex // held through each scan and delivery, by run and Sync alike
	mu      sync.Mutex
	seen    []map[itemKey]seenItem  // per region: each item as last seen or put
	version []map[itemKey]time.Time // per region: the time of the write each item holds
	pending []change
	cut     []time.Time // per region: cut off until then
	stats   ReplicaStats
	err     error

	stop chan struct{}
	done chan struct{}
}

// ReplicaStats counts what a Replicator did.
type ReplicaStats struct {
	Found     int64 // writes found in their regions
	Copied    int64 // items put into other regions
	Overruled int64 // copies not put: the region held a later write (last writer wins)
}

type itemKey struct{ pk, sk string }

type seenItem struct {
	item map[string]types.AttributeValue
	enc  string
}

type change struct {
	key    itemKey
	item   map[string]types.AttributeValue
	enc    string
	at     time.Time
	origin int
	to     []bool // regions still to deliver to
}

// NewReplicator starts replicating table among regions, each written
// changes reaching the others after lag; it scans every poll (default
// lag/10, at least 5ms). Close stops it.
func NewReplicator(table string, regions []ReplicaAPI, lag, poll time.Duration) *Replicator {
	if poll <= 0 {
		poll = max(lag/10, 5*time.Millisecond)
	}
	r := &Replicator{
		table: table, regions: regions, lag: lag, poll: poll, now: time.Now,
		seen: make([]map[itemKey]seenItem, len(regions)), version: make([]map[itemKey]time.Time, len(regions)),
		cut: make([]time.Time, len(regions)), stop: make(chan struct{}), done: make(chan struct{}),
	}
	for i := range regions {
		r.seen[i], r.version[i] = map[itemKey]seenItem{}, map[itemKey]time.Time{}
	}
	go r.run()
	return r
}

// Cut cuts region i off from the others for d from now.
func (r *Replicator) Cut(i int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut[i] = r.now().Add(d)
}

// Stats returns what the replicator did so far.
func (r *Replicator) Stats() ReplicaStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close stops the replicator and returns the first error it met.
func (r *Replicator) Close() error {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Sync finds every write made so far and delivers it, lag or not, unless
// a region is cut off: for the end of a run, to compare the regions.
func (r *Replicator) Sync(ctx context.Context) error {
	r.cycle.Lock()
	defer r.cycle.Unlock()
	if err := r.scan(ctx); err != nil {
		return err
	}
	return r.deliver(ctx, true)
}

func (r *Replicator) run() {
	defer close(r.done)
	t := time.NewTicker(r.poll)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.cycle.Lock()
		err := r.scan(ctx)
		if err == nil {
			err = r.deliver(ctx, false)
		}
		r.cycle.Unlock()
		cancel()
		if err != nil {
			r.mu.Lock()
			if r.err == nil {
				r.err = err
			}
			r.mu.Unlock()
		}
	}
}

// scan finds the writes made in each region since the last scan.
func (r *Replicator) scan(ctx context.Context) error {
	for i, db := range r.regions {
		items, err := ScanAll(ctx, db, r.table)
		if err != nil {
			return fmt.Errorf("dynamotest: replicator: scan region %d: %w", i, err)
		}
		r.mu.Lock()
		now := r.now()
		for _, it := range items {
			k, enc := keyOf(it), encode(it)
			if r.seen[i][k].enc == enc {
				continue
			}
			r.seen[i][k], r.version[i][k] = seenItem{it, enc}, now
			r.stats.Found++
			to := make([]bool, len(r.regions))
			for j := range to {
				to[j] = j != i
			}
			r.pending = append(r.pending, change{key: k, item: it, enc: enc, at: now, origin: i, to: to})
		}
		r.mu.Unlock()
	}
	return nil
}

// deliver puts the changes whose lag has passed (all, if now) into the
// regions not cut off from their origin, the last writer winning.
func (r *Replicator) deliver(ctx context.Context, all bool) error {
	r.mu.Lock()
	now := r.now()
	type put struct {
		c    change // a copy: pending is compacted below
		to   int
		was  seenItem // what the region held when last seen: the put's condition
		prev time.Time
	}
	var puts []put
	for i := range r.pending {
		c := &r.pending[i]
		if !all && now.Sub(c.at) < r.lag {
			break // pending is in the order found
		}
		if now.Before(r.cut[c.origin]) {
			continue
		}
		for j, want := range c.to {
			if !want || now.Before(r.cut[j]) {
				continue
			}
			c.to[j] = false
			if v, ok := r.version[j][c.key]; ok && v.After(c.at) {
				r.stats.Overruled++ // region j holds a later write
				continue
			}
			puts = append(puts, put{*c, j, r.seen[j][c.key], r.version[j][c.key]})
			r.version[j][c.key], r.seen[j][c.key] = c.at, seenItem{c.item, c.enc}
		}
	}
	r.pending = slices.DeleteFunc(r.pending, func(c change) bool { return !slices.Contains(c.to, true) })
	r.mu.Unlock()
	for _, p := range puts {
		// Put only over what the region held when last scanned: a write
		// it took since is later than this one, and wins.
		in := &dynamodb.PutItemInput{TableName: &r.table, Item: p.c.item}
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = holds(p.was.item)
		_, err := r.regions[p.to].PutItem(ctx, in)
		var failed *types.ConditionalCheckFailedException
		r.mu.Lock()
		switch {
		case errors.As(err, &failed):
			r.stats.Overruled++
			if r.seen[p.to][p.c.key].enc == p.c.enc {
				// Unless a later change came meanwhile, the region's own
				// write is found at the next scan.
				r.seen[p.to][p.c.key], r.version[p.to][p.c.key] = p.was, p.prev
			}
		case err != nil:
			r.mu.Unlock()
			return fmt.Errorf("dynamotest: replicator: put into region %d: %w", p.to, err)
		default:
			r.stats.Copied++
		}
		r.mu.Unlock()
	}
	return nil
}

// holds returns a condition that an item is it (nil: that there is none).
func holds(it map[string]types.AttributeValue) (*string, map[string]string, map[string]types.AttributeValue) {
	if it == nil {
		c := "attribute_not_exists(pk)"
		return &c, nil, nil
	}
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	cond := ""
	for i, k := range slices.Sorted(maps.Keys(it)) {
		if cond != "" {
			cond += " AND "
		}
		n, v := fmt.Sprintf("#a%d", i), fmt.Sprintf(":v%d", i)
		names[n], values[v] = k, it[k]
		cond += n + " = " + v
	}
	return &cond, names, values
}

// ScanAll returns every item of the table, read consistently.
func ScanAll(ctx context.Context, db ReplicaAPI, table string) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: &table, ExclusiveStartKey: start, ConsistentRead: boolPtr(true)})
		if err != nil {
			return nil, err
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil
		}
		start = out.LastEvaluatedKey
	}
}

func boolPtr(b bool) *bool { return &b }

func keyOf(it map[string]types.AttributeValue) itemKey {
	s := func(name string) string {
		if v, ok := it[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	return itemKey{s("pk"), s("sk")}
}

// encode returns a comparable encoding of an item.
func encode(it map[string]types.AttributeValue) string {
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(it)) {
		b = fmt.Appendf(b, "%s=%s;", k, encodeValue(it[k]))
	}
	return string(b)
}

func encodeValue(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + v.Value
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberB:
		return fmt.Sprintf("B%x", v.Value)
	case *types.AttributeValueMemberBOOL:
		return fmt.Sprint("BOOL", v.Value)
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberM:
		return "M{" + encode(v.Value) + "}"
	case *types.AttributeValueMemberL:
		s := "L["
		for _, x := range v.Value {
			s += encodeValue(x) + ","
		}
		return s + "]"
	case *types.AttributeValueMemberSS:
		return fmt.Sprint("SS", slices.Sorted(slices.Values(v.Value)))
	case *types.AttributeValueMemberNS:
		return fmt.Sprint("NS", slices.Sorted(slices.Values(v.Value)))
	}
	return fmt.Sprintf("?%T", v)
}
