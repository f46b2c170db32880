// Package dynamostore keeps Sluice's counters in one Amazon DynamoDB table,
// so that any number of `sluice serve` nodes sharing the table give the
// answers one node would give. docs/dynamodb.md describes the table.
//
// Every decision is a conditional write, never a read-then-write without a
// condition. A counter item carries its state and a version; a write is
// conditioned on the version it was computed from (or on the item not
// existing), and asks for the item as it is if the condition fails
// (ReturnValuesOnConditionCheckFailure=ALL_OLD, free of read cost), so a
// lost race is recomputed from what won it without a further read. The
// store remembers the last state it saw of each key, so that a decision on a
// key this node wrote last is one round trip: the write. A denial is never
// made from memory: it is confirmed by a consistent read, since another node
// may have released capacity. A request on several keys is one
// TransactWriteItems, every item conditioned on its version, or, for a
// sliding window and a concurrency counter's named lease, on its numbers
// (numbers.go), so that a stale copy still decides in one transaction.
//
// Contention is not a fault: a node combines its concurrent single-key
// decisions on one key into one conditional write (combine.go), so that
// only nodes contend for a hot key, and a write lost to another node's is
// decided again from the item that won, within the deadline, without
// counting against the attempts allowed for faults (Options.MaxAttempts).
//
// Expiry is in the state and checked by the algorithms at every decision;
// the table's TTL attribute only lets DynamoDB reclaim space, eventually.
package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// API is the part of the DynamoDB client the store uses.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	// DescribeTable is Ping's: see there.
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Options configures a Store.
type Options struct {
	// Table is the table's name. Required.
	Table string
	// CacheKeys caps the states remembered locally. Default 100,000.
	CacheKeys int
	// MaxAttempts bounds the write requests of one decision (or lease
	// release or renewal, or batch of single-key decisions) that meets
	// faults: its first request, and its retries, with jittered backoff
	// within the decision's deadline, of requests throttled, in conflict
	// with a transaction, or unanswered, and of conditions that failed on
	// an item no other writer changed. Each may bill a write, so this
	// bounds what a fault costs. Past it, the decision fails with
	// KindUnavailable and the policy's fail mode answers. A conditional
	// write lost to another node's is contention, not a fault: it is
	// decided again from the item that won, bounded by the deadline, not
	// by MaxAttempts (Stats.Contended counts these). Default 4.
	MaxAttempts int
	// TenantTTL is how long GetTenant remembers a tenant, or its absence,
	// before reading the table again: how long another node's change to a
	// tenant takes to be seen here. This node's own changes are seen at
	// once. Default 1s; negative reads the table every time.
	TenantTTL time.Duration
	// Now is the clock of the tenant cache. Default time.Now.
	Now func() time.Time
	// Region, if not empty, puts the store in multi-region mode (see
	// region.go and docs/dynamodb.md): the table is a global table, this
	// node is in Region, one of Regions (every region of the table, the
	// same list on every node), and every counter is its region's own.
	Region  string
	Regions []string
	// Rebalance is how often, at most, a node reads a key's allotments
	// and rebalances them while it decides on the key, in multi-region
	// mode, and the most its copy of them ages: the shorter, the sooner
	// units follow demand between regions, and the more reads (at most
	// one a period per key and node, and never more than its decisions)
	// and allotment writes. Default DefaultRebalance.
	Rebalance time.Duration
}

// DefaultRebalance is Options.Rebalance's default: units follow demand to
// another region in about two replication lags and a second
// (docs/dynamodb.md).
const DefaultRebalance = 250 * time.Millisecond

// Store is a sluice.Store on DynamoDB. It is safe for concurrent use.
type Store struct {
	db      API
	table   string
	max     int
	cache   *cache
	tenants *tenantCache
	// auditSeq orders this node's audit entries of one nanosecond.
	auditSeq atomic.Uint64
	closed   chan struct{}
	once     sync.Once
	// bg is the context of the store's own work (the idle refresh),
	// cancelled by Close, which waits for bgDone.
	bg       context.Context
	cancelBG context.CancelFunc
	bgDone   sync.WaitGroup
	stats    Stats

	// keys serialise this node's writes of one key, and combine its
	// single-key decisions on it (turns.go, combine.go).
	keys keys

	leases leases // leased mode's batches

	// Multi-region mode (region.go).
	region    string
	regions   []string
	rebalance time.Duration
	allots    allotments
	maxAllots int    // the most keys whose allotments a node keeps: CacheKeys
	node      string // this node's id in its region's allotment items: random, new at each start
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store on the table, which must exist (CreateTable).
func New(db API, opts Options) (*Store, error) {
	if opts.Table == "" {
		return nil, errors.New("dynamostore: no table name")
	}
	if opts.CacheKeys <= 0 {
		opts.CacheKeys = 100_000
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 4
	}
	if opts.TenantTTL == 0 {
		opts.TenantTTL = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rebalance <= 0 {
		opts.Rebalance = DefaultRebalance
	}
	if opts.Region != "" {
		if !validRegion(opts.Region) || !slices.Contains(opts.Regions, opts.Region) {
			return nil, fmt.Errorf("dynamostore: region %q must be one of the regions %v", opts.Region, opts.Regions)
		}
		for _, r := range opts.Regions {
			if !validRegion(r) {
				return nil, fmt.Errorf("dynamostore: region %q must be 1 to 64 letters, digits, '-' or '_'", r)
			}
		}
		if len(slices.Compact(slices.Sorted(slices.Values(opts.Regions)))) != len(opts.Regions) {
			return nil, fmt.Errorf("dynamostore: regions %v name one region twice", opts.Regions)
		}
	}
	s := &Store{
		db: db, table: opts.Table, max: opts.MaxAttempts,
		cache:   newCache(opts.CacheKeys),
		tenants: newTenantCache(opts.TenantTTL, opts.CacheKeys, opts.Now),
		closed:  make(chan struct{}),
		region:  opts.Region, regions: slices.Clone(opts.Regions), rebalance: opts.Rebalance, maxAllots: opts.CacheKeys,
		node: writeID(),
	}
	s.bg, s.cancelBG = context.WithCancel(context.Background())
	if s.region != "" {
		s.bgDone.Go(s.idleRefresh) // stopped by Close
	}
	return s, nil
}

// Close implements sluice.Store: it stops the store's own work (the idle
// refresh of multi-region mode) and waits for it. The client is the
// caller's.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.closed)
		s.cancelBG()
	})
	s.bgDone.Wait()
	return nil
}

// Ping reports whether the table answers, for readiness checks, by
// DescribeTable: it touches no item, so it needs no key of any tenant's
// (a node under one tenant's IAM policy, TenantPolicy, may reach only that
// tenant's items, and a node serving many tenants has no one tenant to
// probe), costs no read units, and fails as the table's requests would when
// the endpoint, the credentials or the table are wrong. A table that is not
// ACTIVE (being created, or deleted) is not ready.
func (s *Store) Ping(ctx context.Context) error {
	out, err := s.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &s.table})
	if err != nil {
		return unavailable("ping", err)
	}
	if out.Table == nil || (out.Table.TableStatus != types.TableStatusActive && out.Table.TableStatus != types.TableStatusUpdating) {
		return &sluice.Error{Op: "dynamostore.ping", Kind: sluice.KindUnavailable, Message: "table not active"}
	}
	return nil
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Attribute names.
const (
	attrPK      = "pk"
	attrSK      = "sk"
	attrState   = "st"  // algo.State, binary
	attrVersion = "v"   // version of st, incremented by every write
	attrExpires = "exp" // when st expires, epoch milliseconds
	attrTTL     = "ttl" // DynamoDB TTL, epoch seconds: exp plus a day
	attrWrite   = "w"   // id of the write that put this version
	attrTAT     = "tat" // a token bucket's theoretical arrival time, epoch ns, instead of st and v
	// A sliding window's state as numbers as well (or, after a leased
	// take, instead of st), so that a leased batch is one UpdateItem
	// whose condition is the algorithm's, on no version (leased.go).
	attrWinStart = "ws" // the current window's start, epoch ns
	attrCurr     = "c"  // its hits
	attrPrev     = "p"  // the previous window's hits
	skCounter    = "c"
	skAllotment  = "a#" // and the region: a region's allotment item of a key (region.go)
)

// validRegion reports whether r can name a region: it ends a counter's
// partition key, so it holds no '#'.
func validRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// counterPK is a counter's partition key: the tenant's id first (see
// docs/dynamodb.md), its epoch if it has one ("#e", in base 36), then the
// key space's number after "c" (configured policies, inline ones,
// Sluice's own, and their penalty boxes, each apart), the algorithm's
// number, the policy and the key, the key as it is when it is UTF-8 ("u:") and in base64
// otherwise ("b:"). Tenant ids and policy names cannot hold '#', so the
// parts cannot run into each other.
func counterPK(k *sluice.Key) string {
	v := "u:" + k.Value
	if !utf8.ValidString(k.Value) {
		v = "b:" + base64.RawURLEncoding.EncodeToString([]byte(k.Value))
	}
	tenant := k.Tenant
	if k.Epoch != 0 {
		// After the tenant's "#" (dynamodb:LeadingKeys), before "#c": a
		// key of epoch zero is as it was before epochs.
		tenant += "#e" + strconv.FormatInt(k.Epoch, 36)
	}
	pk := tenant + "#c" + strconv.Itoa(int(k.Space)) + "#" + strconv.Itoa(int(k.Algorithm)) + "#" + k.Policy + "#" + v
	if k.Region != "" {
		// Keys are base64 or UTF-8 text after "u:"; "#r:" ends one only in
		// a region's counter, whose region id has no '#'.
		pk += "#r:" + k.Region
	}
	return pk
}

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: pk}, attrSK: &types.AttributeValueMemberS{Value: sk}}
}

// versioned is a key's state as an item holds it, with what pins that
// item in a condition: nothing (no item), its version (v), or, for a token
// bucket item, its arrival time (tat). write is the id of the write that put
// it.
type versioned struct {
	state   algo.State
	kind    itemKind
	version int64 // of a generic item
	write   string
	// counters: a sliding window's item holds its state as numbers (ws,
	// c, p), as every write of this version makes it.
	counters bool
	// leases: a concurrency counter's item holds its leases as a map
	// (ls) and their sum (u) (numbers.go).
	leases bool
}

type itemKind uint8

const (
	noItem      itemKind = iota
	genericItem          // st and v
	tatItem              // tat: a token bucket, updated without a read
)

// decodeItem reads a counter item; a nil item is noItem.
func decodeItem(item map[string]types.AttributeValue) (versioned, error) {
	if len(item) == 0 {
		return versioned{}, nil
	}
	var v versioned
	if w, ok := item[attrWrite].(*types.AttributeValueMemberS); ok {
		v.write = w.Value
	}
	if n, ok := item[attrTAT].(*types.AttributeValueMemberN); ok {
		tat, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return versioned{}, fmt.Errorf("dynamostore: counter tat: %w", err)
		}
		v.kind = tatItem
		v.state = algo.State{Algorithm: sluice.TokenBucket, TAT: tat, Expires: tat}
		return v, nil
	}
	v.kind = genericItem
	if b, ok := item[attrState].(*types.AttributeValueMemberB); ok {
		if err := v.state.UnmarshalBinary(b.Value); err != nil {
			return versioned{}, fmt.Errorf("dynamostore: counter state: %w", err)
		}
	}
	if n, ok := item[attrVersion].(*types.AttributeValueMemberN); ok {
		var err error
		if v.version, err = strconv.ParseInt(n.Value, 10, 64); err != nil {
			return versioned{}, fmt.Errorf("dynamostore: counter version: %w", err)
		}
	}
	if err := decodeLeases(item, &v); err != nil {
		return versioned{}, err
	}
	if _, ok := item[attrWinStart]; ok {
		var nums [4]int64
		for i, a := range []string{attrWinStart, attrCurr, attrPrev, attrExpires} {
			n, ok := item[a].(*types.AttributeValueMemberN)
			if !ok {
				return versioned{}, fmt.Errorf("dynamostore: sliding window counter without %s", a)
			}
			var err error
			if nums[i], err = strconv.ParseInt(n.Value, 10, 64); err != nil {
				return versioned{}, fmt.Errorf("dynamostore: sliding window counter %s: %w", a, err)
			}
		}
		v.counters = true
		if _, ok := item[attrState]; !ok { // a leased take's: the numbers alone
			v.state = algo.State{Algorithm: sluice.SlidingWindow, Start: nums[0], Count: nums[1], Prev: nums[2], Expires: nums[3] * int64(time.Millisecond)}
		}
	}
	return v, nil
}

// after returns the versioned a write of st over from leaves.
func after(from versioned, st algo.State, id string) versioned {
	if st.Algorithm == sluice.TokenBucket {
		return versioned{state: st, kind: tatItem, write: id}
	}
	return versioned{state: st, kind: genericItem, version: from.version + 1, write: id,
		counters: st.Algorithm == sluice.SlidingWindow, leases: st.Algorithm == sluice.Concurrency}
}

// put returns the Put of a counter's new state, conditioned on the item it
// was computed from, and marked with the write's id: if the SDK retries a
// write whose first try landed but whose answer was lost, the retry's
// condition fails and the returned item bears this id, so the write is known
// to have landed rather than taken for another's, which would count its
// hits twice. If another node wrote between the landing and the retry, the
// returned item bears its id and the hits are counted again: at most one
// request's hits, erring on the side of the limit. A token bucket is put as its arrival time alone (tat), as the
// no-read updates (gcra) expect.
func (s *Store) put(pk string, st *algo.State, from versioned, id string) (*types.Put, error) {
	item := key(pk, skCounter)
	item[attrWrite] = &types.AttributeValueMemberS{Value: id}
	to := after(from, *st, id)
	if to.kind == tatItem {
		item[attrTAT] = &types.AttributeValueMemberN{Value: strconv.FormatInt(st.TAT, 10)}
	} else {
		b, err := st.MarshalBinary()
		if err != nil {
			return nil, err
		}
		item[attrState] = &types.AttributeValueMemberB{Value: b}
		item[attrVersion] = &types.AttributeValueMemberN{Value: strconv.FormatInt(to.version, 10)}
		item[attrExpires] = &types.AttributeValueMemberN{Value: strconv.FormatInt(st.Expires/int64(time.Millisecond), 10)}
		if st.Algorithm == sluice.SlidingWindow {
			item[attrWinStart] = &types.AttributeValueMemberN{Value: strconv.FormatInt(st.Start, 10)}
			item[attrCurr] = &types.AttributeValueMemberN{Value: strconv.FormatInt(st.Count, 10)}
			item[attrPrev] = &types.AttributeValueMemberN{Value: strconv.FormatInt(st.Prev, 10)}
		}
		if st.Algorithm == sluice.Concurrency {
			putLeases(item, st)
		}
	}
	item[attrTTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(ttlOf(st.Expires), 10)}
	p := &types.Put{TableName: &s.table, Item: item, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	switch from.kind {
	case noItem:
		p.ConditionExpression = aws.String("attribute_not_exists(pk)")
	case genericItem:
		// The version, and the write that put it: a version number can
		// come round again if DynamoDB deletes an expired item and it is
		// made anew, but not with the same write id.
		p.ConditionExpression = aws.String("v = :v")
		p.ExpressionAttributeValues = map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: strconv.FormatInt(from.version, 10)}}
		if from.write != "" {
			p.ConditionExpression = aws.String("v = :v AND w = :from")
			p.ExpressionAttributeValues[":from"] = &types.AttributeValueMemberS{Value: from.write}
		}
	case tatItem:
		p.ConditionExpression = aws.String("tat = :tat")
		p.ExpressionAttributeValues = map[string]types.AttributeValue{":tat": &types.AttributeValueMemberN{Value: strconv.FormatInt(from.state.TAT, 10)}}
	}
	return p, nil
}

// ttlOf is the TTL attribute of a state expiring at expires (epoch ns): a
// day later, in epoch seconds.
func ttlOf(expires int64) int64 { return expires/int64(time.Second) + 1 + 86400 }

// read returns a key's current state with a consistent read.
func (s *Store) read(ctx context.Context, pk string) (versioned, error) {
	s.stats.reads.Add(1)
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(pk, skCounter), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return versioned{}, unavailable("read", err)
	}
	return decodeItem(out.Item)
}

// Apply implements sluice.Store.
func (s *Store) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if s.isClosed() {
		return sluice.ErrStoreClosed
	}
	t := now.UnixNano()
	if s.region != "" {
		global := ops
		ops = make([]sluice.Op, len(global))
		for i, op := range global {
			var err error
			if ops[i], err = s.regional(ctx, t, op); err != nil {
				return err
			}
		}
		defer func() {
			for i := range dst {
				dst[i].Limit = global[i].Policy.Limit // the limit, not this region's part
			}
		}()
	}
	if s.leasedCaller(ops) {
		pk := counterPK(&ops[0].Key)
		unlock, err := s.lock(ctx, pk)
		if err != nil {
			return err
		}
		defer unlock()
		d, err := s.leased(ctx, t, &ops[0], pk)
		dst[0] = d
		return err
	}
	if len(ops) == 1 && ops[0].Hits > 0 {
		d, err := s.combine(ctx, t, &ops[0], counterPK(&ops[0].Key))
		dst[0] = d
		return err
	}
	return s.applyVersioned(ctx, t, ops, dst)
}

// applyVersioned decides ops by versioned conditional writes.
func (s *Store) applyVersioned(ctx context.Context, t int64, ops []sluice.Op, dst []sluice.Decision) error {
	pks := make([]string, len(ops))
	cur := make([]versioned, len(ops))
	known := make([]bool, len(ops)) // read from the table, not remembered
	for i := range ops {
		pks[i] = counterPK(&ops[i].Key)
		if v, ok := s.cache.get(pks[i]); ok {
			cur[i] = v
		}
	}
	// Ops on the same key share its state: decide from the first's.
	first := make([]int, len(ops))
	for i := range ops {
		first[i] = i
		for j := range i {
			if pks[j] == pks[i] {
				first[i] = first[j]
				break
			}
		}
	}
	if !s.leasedCaller(ops) { // its caller holds the key's turn
		unlock, err := s.lock(ctx, pks...)
		if err != nil {
			return err
		}
		defer unlock()
	}
	stored := make([]algo.State, len(ops))
	next := make([]algo.State, len(ops))
	// A key's only op may be written in a transaction conditioned on its
	// numbers (numbers.go), unless they failed once in this decision.
	numbersFailed := make([]bool, len(ops))
	numeric := func(i int, id string) (numbersUpdate, bool) {
		for j := range ops {
			if j != i && pks[j] == pks[i] {
				return numbersUpdate{}, false
			}
		}
		return numbers(&ops[i], cur[i], next[i], &dst[i], t, numbersFailed[i], id)
	}
	b := s.budget()
	for {
		for i := range ops {
			stored[i] = cur[first[i]].state
		}
		allowed := algo.DecideAll(ops, stored, next, t, dst)
		// An admitted write is checked by its condition. A denial stands
		// on the state this node remembers: other nodes' admissions since
		// only add hits, so the table would deny too (the deny cache: a
		// key over its limit costs DynamoDB nothing), except for leases,
		// which another node may have released. A read with zero hits
		// answers from the table.
		if mustRead := (!allowed && anyLease(ops)) || anyPeek(ops); mustRead {
			stale := false
			for i := range ops {
				if first[i] == i && !known[i] && ((!allowed && ops[i].Policy.Algorithm == sluice.Concurrency) || ops[i].Hits == 0) {
					v, err := s.read(ctx, pks[i])
					if err != nil {
						return err
					}
					cur[i], known[i] = v, true
					s.cache.put(pks[i], v)
					stale = true
				}
			}
			if stale {
				continue
			}
		}
		if !allowed {
			if !anyLease(ops) {
				s.stats.localDenials.Add(1)
			}
			return nil
		}
		// The last op on each key carries its final state.
		var writes []int
		for i := range ops {
			if ops[i].Hits == 0 {
				continue
			}
			last := true
			for j := i + 1; j < len(ops); j++ {
				if pks[j] == pks[i] && ops[j].Hits != 0 {
					last = false
				}
			}
			if last {
				writes = append(writes, i)
			}
		}
		if len(writes) == 0 {
			return nil
		}
		lost, id, err := s.write(ctx, b, pks, cur, first, next, writes, numeric)
		if err != nil {
			return err
		}
		if lost == nil {
			for _, i := range writes {
				s.cache.put(pks[i], after(cur[first[i]], next[i], id))
			}
			return nil
		}
		// Lost a race: recompute from what won it, as returned.
		s.stats.conflicts.Add(1)
		moved := false
		for i, v := range lost {
			moved = moved || changed(cur[first[i]], v)
			cur[first[i]], known[first[i]] = v, true
			s.cache.put(pks[i], v)
			if ops[i].Policy.Algorithm == sluice.Concurrency {
				numbersFailed[i] = true
			}
		}
		b.lost(moved)
	}
}

// write puts the new states of ops writes, each conditioned on the version
// it was computed from. It returns, for the ops whose condition failed, the
// items as they are, and the write's id. Each request it sends is taken
// from b; a request throttled, in conflict, or unanswered is sent again,
// after a backoff, while b allows.
//
// In a transaction, an item that numeric (if not nil) returns an update of
// is written by that update, conditioned on its numbers (numbers.go).
func (s *Store) write(ctx context.Context, b *budget, pks []string, cur []versioned, first []int, next []algo.State, writes []int,
	numeric func(i int, id string) (numbersUpdate, bool)) (map[int]versioned, string, error) {
	id := writeID()
	if len(writes) == 1 {
		i := writes[0]
		p, err := s.put(pks[i], &next[i], cur[first[i]], id)
		if err != nil {
			return nil, id, err
		}
		in := &dynamodb.PutItemInput{
			TableName: p.TableName, Item: p.Item, ConditionExpression: p.ConditionExpression,
			ExpressionAttributeValues: p.ExpressionAttributeValues, ReturnValuesOnConditionCheckFailure: p.ReturnValuesOnConditionCheckFailure,
		}
		for {
			if err := b.take(ctx, "write"); err != nil {
				return nil, id, err
			}
			s.stats.writes.Add(1)
			s.stats.writeUnits.Add(writeUnits(p.Item))
			// The same request, id and all, on every try: if an
			// earlier try landed unanswered, this one's condition
			// fails on an item bearing the id.
			_, err = s.db.PutItem(ctx, in, noRetry)
			var ccf *types.ConditionalCheckFailedException
			switch {
			case err == nil:
				return nil, id, nil
			case errors.As(err, &ccf):
				v, err := s.failedItem(ctx, pks[i], ccf.Item)
				if err != nil {
					return nil, id, err
				}
				if v.write == id {
					return nil, id, nil // our own write, landed on an earlier try
				}
				return map[int]versioned{i: v}, id, nil
			case b.failed(ctx, err):
				continue
			default:
				return nil, id, unavailable("write", err)
			}
		}
	}
	for {
		items := make([]types.TransactWriteItem, 0, len(writes))
		var units int64
		for _, i := range writes {
			if numeric != nil {
				if u, ok := numeric(i, id); ok {
					items = append(items, u.transactItem(s.table, pks[i]))
					units += 2
					continue
				}
			}
			p, err := s.put(pks[i], &next[i], cur[first[i]], id)
			if err != nil {
				return nil, id, err
			}
			items = append(items, types.TransactWriteItem{Put: p})
			units += 2 * writeUnits(p.Item)
		}
		in := &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: &id}
		for {
			if err := b.take(ctx, "transact"); err != nil {
				return nil, id, err
			}
			s.stats.transactions.Add(1)
			s.stats.writeUnits.Add(units)
			// The token makes a retry of an unanswered transaction
			// idempotent.
			_, err := s.db.TransactWriteItems(ctx, in, noRetry)
			var tce *types.TransactionCanceledException
			if errors.As(err, &tce) && !transactionRetryable(tce) {
				lost := map[int]versioned{}
				for n, r := range tce.CancellationReasons {
					if r.Code == nil || *r.Code != "ConditionalCheckFailed" || n >= len(writes) {
						continue
					}
					v, err := s.failedItem(ctx, pks[writes[n]], r.Item)
					if err != nil {
						return nil, id, err
					}
					lost[writes[n]] = v
				}
				if len(lost) == 0 {
					return nil, id, unavailable("transact", err)
				}
				for _, v := range lost {
					if v.write == id {
						// An earlier try landed, unanswered, and its
						// token was not honoured: a cancelled
						// transaction writes nothing, so every item
						// is ours.
						return nil, id, nil
					}
				}
				return lost, id, nil
			}
			switch {
			case err == nil:
				return nil, id, nil
			case tce != nil && b.failed(ctx, err):
				// Cancelled, nothing written: a new transaction,
				// with a new token (a token names one outcome).
				id = writeID()
			case b.failed(ctx, err):
				continue
			default:
				return nil, id, unavailable("transact", err)
			}
			break
		}
	}
}

// failedItem returns the counter item a failed condition returned, or, if
// it returned none (some DynamoDB-compatible servers ignore
// ReturnValuesOnConditionCheckFailure), the item as a consistent read finds
// it: a failure without an item is never taken to mean that there is no
// item, which would condition every later write on attribute_not_exists
// and wedge the key.
func (s *Store) failedItem(ctx context.Context, pk string, item map[string]types.AttributeValue) (versioned, error) {
	if len(item) > 0 {
		return decodeItem(item)
	}
	s.stats.emptyFailures.Add(1)
	return s.read(ctx, pk)
}

// Release implements sluice.Store.
func (s *Store) Release(ctx context.Context, now time.Time, k sluice.Key, p *sluice.Policy, lease uint64) (sluice.Decision, error) {
	return s.updateLease(ctx, now, k, p, lease, algo.Release)
}

// Renew implements sluice.Store.
func (s *Store) Renew(ctx context.Context, now time.Time, k sluice.Key, p *sluice.Policy, lease uint64) (sluice.Decision, error) {
	return s.updateLease(ctx, now, k, p, lease, algo.Renew)
}

func (s *Store) updateLease(ctx context.Context, now time.Time, k sluice.Key, p *sluice.Policy, lease uint64,
	update func(*sluice.Policy, algo.State, int64, uint64) (algo.State, sluice.Decision, bool)) (sluice.Decision, error) {
	if s.region != "" {
		// The lease is in this region's counter, of its part of the limit
		// (concurrency keeps the even split).
		op, err := s.regional(ctx, now.UnixNano(), sluice.Op{Key: k, Policy: p})
		if err != nil {
			return sluice.Decision{}, err
		}
		k, p = op.Key, op.Policy
	}
	if s.isClosed() {
		return sluice.Decision{}, sluice.ErrStoreClosed
	}
	pk := counterPK(&k)
	unlock, err := s.lock(ctx, pk)
	if err != nil {
		return sluice.Decision{}, err
	}
	defer unlock()
	cur, err := s.read(ctx, pk)
	if err != nil {
		return sluice.Decision{}, err
	}
	b := s.budget()
	for {
		next, d, ok := update(p, cur.state, now.UnixNano(), lease)
		if !ok {
			return sluice.Decision{}, sluice.ErrLeaseNotFound
		}
		lost, id, err := s.write(ctx, b, []string{pk}, []versioned{cur}, []int{0}, []algo.State{next}, []int{0}, nil)
		if err != nil {
			return sluice.Decision{}, err
		}
		if lost == nil {
			s.cache.put(pk, after(cur, next, id))
			return d, nil
		}
		s.stats.conflicts.Add(1)
		b.lost(changed(cur, lost[0]))
		cur = lost[0]
	}
}

// writeID returns a random id for one write.
func writeID() string {
	var b [12]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// leasedCaller reports whether ops is a leased batch: decided by leased,
// which holds the key's turn while it calls applyVersioned. A burn op
// (sluice.Op.Burn) is not: its hits go to the table, whatever the count,
// not to a batch that ends at the limit.
func (s *Store) leasedCaller(ops []sluice.Op) bool {
	a := ops[0].Policy.Algorithm
	return len(ops) == 1 && ops[0].Policy.Leased && (a == sluice.FixedWindow || a == sluice.SlidingWindow) && ops[0].Hits > 0 && !ops[0].Burn
}

func anyLease(ops []sluice.Op) bool {
	for i := range ops {
		if ops[i].Policy.Algorithm == sluice.Concurrency {
			return true
		}
	}
	return false
}

func anyPeek(ops []sluice.Op) bool {
	for i := range ops {
		if ops[i].Hits == 0 {
			return true
		}
	}
	return false
}

func unavailable(op string, err error) error {
	return &sluice.Error{Op: "dynamostore." + op, Kind: sluice.KindUnavailable, Err: err}
}
