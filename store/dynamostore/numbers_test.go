package dynamostore

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// admitFixture is k stores on one new table, all reaching it through one
// counting proxy, deciding a gateway's admission: a tenant's and a
// session's connection counts (concurrency, one named lease per node) and
// their connects per minute (sliding windows), in one transaction. The
// session's count's limit is 1000: the tenant's is the one tested.
type admitFixture struct {
	nodes    []*Store
	px       *dynamotest.FaultProxy
	tenant   sluice.Policy
	session  sluice.Policy
	tenantR  sluice.Policy
	sessionR sluice.Policy
	units    []int64 // each node's lease's units on the tenant's count
	sunits   []int64 // and on the session's
}

func newAdmitFixture(t *testing.T, k int, conns, rate int64) *admitFixture {
	t.Helper()
	first, px := proxied(t)
	f := &admitFixture{
		nodes: []*Store{first}, px: px,
		tenant:   sluice.Policy{Name: "conns", Algorithm: sluice.Concurrency, Limit: conns, LeaseTTL: time.Hour},
		session:  sluice.Policy{Name: "sconns", Algorithm: sluice.Concurrency, Limit: 1000, LeaseTTL: time.Hour},
		tenantR:  sluice.Policy{Name: "rate", Algorithm: sluice.SlidingWindow, Limit: rate, Window: time.Minute},
		sessionR: sluice.Policy{Name: "srate", Algorithm: sluice.SlidingWindow, Limit: rate, Window: time.Minute},
		units:    make([]int64, k), sunits: make([]int64, k),
	}
	for _, p := range []*sluice.Policy{&f.tenant, &f.session, &f.tenantR, &f.sessionR} {
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	f.nodes = append(f.nodes, moreNodes(t, first, k-1)...)
	return f
}

func (f *admitFixture) lease(i int) uint64 { return sluice.OwnedLease(uint16(i+1), 7) }

// connect decides one connect on node i at now: its leases grow by one.
// dead are owners known dead.
func (f *admitFixture) connect(t *testing.T, i int, now time.Time, dead ...uint16) bool {
	t.Helper()
	ops := []sluice.Op{
		{Key: sluice.Key{Tenant: "acme", Policy: "conns"}, Policy: &f.tenant, Hits: f.units[i] + 1, Lease: f.lease(i), DeadOwners: dead, RemainingMayLag: true},
		{Key: sluice.Key{Tenant: "acme", Policy: "sconns", Value: "s"}, Policy: &f.session, Hits: f.sunits[i] + 1, Lease: f.lease(i), DeadOwners: dead, RemainingMayLag: true},
		{Key: sluice.Key{Tenant: "acme", Policy: "rate"}, Policy: &f.tenantR, Hits: 1, RemainingMayLag: true},
		{Key: sluice.Key{Tenant: "acme", Policy: "srate", Value: "s"}, Policy: &f.sessionR, Hits: 1, RemainingMayLag: true},
	}
	dst := make([]sluice.Decision, len(ops))
	if err := f.nodes[i].Apply(context.Background(), now, ops, dst); err != nil {
		t.Fatal(err)
	}
	ok := true
	for _, d := range dst {
		ok = ok && d.Allowed
	}
	if ok {
		f.units[i]++
		f.sunits[i]++
	}
	return ok
}

// shrink sets node i's lease on the tenant's count to n units (n > 0).
func (f *admitFixture) shrink(t *testing.T, i int, now time.Time, n int64) {
	t.Helper()
	dst := make([]sluice.Decision, 1)
	ops := []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: "conns"}, Policy: &f.tenant, Hits: n, Lease: f.lease(i), RemainingMayLag: true}}
	if err := f.nodes[i].Apply(context.Background(), now, ops, dst); err != nil {
		t.Fatal(err)
	}
	if !dst[0].Allowed {
		t.Fatalf("shrinking node %d's lease to %d: denied", i, n)
	}
	f.units[i] = n
}

// TestAdmissionTransactionsAlternating: two and three stores decide
// connects on the same four counters in turn, each from a copy of the
// items that the others' writes made stale: one TransactWriteItems per
// connect, but for each node's first (the items made, a node's lease
// added).
func TestAdmissionTransactionsAlternating(t *testing.T) {
	for _, k := range []int{2, 3} {
		t.Run(string(rune('0'+k))+" nodes", func(t *testing.T) {
			f := newAdmitFixture(t, k, 1000, 1000)
			now := time.Date(2026, 11, 27, 10, 0, 1, 0, time.UTC)
			const n = 60
			for c := range n {
				if !f.connect(t, c%k, now.Add(time.Duration(c)*time.Millisecond)) {
					t.Fatalf("connect %d on node %d denied below the limits", c, c%k)
				}
			}
			got := f.px.Requests("TransactWriteItems")
			if most := int64(n + k); got > most {
				t.Errorf("%d connects on %d nodes took %d transactions, want at most %d", n, k, got, most)
			}
			t.Logf("%d connects on %d nodes: %d TransactWriteItems, %d GetItem, %d total", n, k, got, f.px.Requests("GetItem"), f.px.Total())
		})
	}
}

// TestAdmissionExactAtLimit: nodes in turn take a tenant's connections
// up to the limit and never past it, whatever their copies; at the limit
// every node is refused, and a unit released on one node is taken by
// exactly one connect of another.
func TestAdmissionExactAtLimit(t *testing.T) {
	const limit = 7
	f := newAdmitFixture(t, 3, limit, 1000)
	now := time.Date(2026, 11, 27, 10, 0, 1, 0, time.UTC)
	admitted := 0
	for c := range 3 * limit {
		if f.connect(t, c%3, now.Add(time.Duration(c)*time.Millisecond)) {
			admitted++
		}
		if c < limit && admitted != c+1 {
			t.Fatalf("connect %d refused below the limit (%d admitted)", c, admitted)
		}
	}
	if admitted != limit {
		t.Fatalf("admitted %d connects, want exactly the limit %d", admitted, limit)
	}
	now = now.Add(time.Second)
	// Node 0 gives one unit back: exactly one connect on the others fits.
	if f.units[0] < 2 {
		t.Fatalf("node 0 holds %d units", f.units[0])
	}
	f.shrink(t, 0, now, f.units[0]-1)
	if !f.connect(t, 1, now.Add(time.Millisecond)) {
		t.Fatal("a connect refused after a unit was released")
	}
	if f.connect(t, 2, now.Add(2*time.Millisecond)) {
		t.Fatal("a connect admitted past the limit")
	}
}

// TestAdmissionExpiredAndDeadLeases: a lease expired, or of an owner
// known dead, no longer counts, although the others' copies of the item
// still hold it.
func TestAdmissionExpiredAndDeadLeases(t *testing.T) {
	const limit = 4
	f := newAdmitFixture(t, 3, limit, 1000)
	now := time.Date(2026, 11, 27, 10, 0, 1, 0, time.UTC)
	// Node 2 takes two units, node 1 two: the limit.
	for _, i := range []int{2, 2, 1, 1} {
		if !f.connect(t, i, now) {
			t.Fatal("refused below the limit")
		}
	}
	if f.connect(t, 0, now) {
		t.Fatal("admitted past the limit")
	}
	// Node 2 is dead: its two units are free to the checks that say so.
	if !f.connect(t, 0, now, 3) || !f.connect(t, 1, now, 3) {
		t.Fatal("refused with a dead owner's units free")
	}
	if f.connect(t, 0, now, 3) {
		t.Fatal("admitted past the limit after a dead owner's leases were dropped")
	}
	// Every lease expires: the whole limit is free again.
	later := now.Add(2 * time.Hour)
	f.units = make([]int64, 3)
	f.sunits = make([]int64, 3)
	admitted := 0
	for c := range 2 * limit {
		if f.connect(t, c%2, later.Add(time.Duration(c)*time.Millisecond)) {
			admitted++
		}
	}
	if admitted != limit {
		t.Fatalf("after the leases expired, admitted %d, want %d", admitted, limit)
	}
}

// TestAdmissionConcurrentNodes: three stores connect at once, each from
// its own goroutines, past a tenant's limit of connections: exactly the
// limit is admitted (units only grow, so a refusal below it would show as
// fewer), and the item's map and sum say so.
func TestAdmissionConcurrentNodes(t *testing.T) {
	const limit = 20
	f := newAdmitFixture(t, 3, limit, 1000)
	now := time.Date(2026, 11, 27, 10, 0, 1, 0, time.UTC)
	var admitted [3]int
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			for c := range 15 {
				// f.units[i] is node i's own: one goroutine a node.
				ops := []sluice.Op{
					{Key: sluice.Key{Tenant: "acme", Policy: "conns"}, Policy: &f.tenant, Hits: f.units[i] + 1, Lease: f.lease(i), RemainingMayLag: true},
					{Key: sluice.Key{Tenant: "acme", Policy: "rate"}, Policy: &f.tenantR, Hits: 1, RemainingMayLag: true},
				}
				dst := make([]sluice.Decision, len(ops))
				if err := f.nodes[i].Apply(context.Background(), now.Add(time.Duration(c)*time.Millisecond), ops, dst); err != nil {
					t.Error(err)
					return
				}
				if dst[0].Allowed && dst[1].Allowed {
					f.units[i]++
					admitted[i]++
				}
			}
		})
	}
	wg.Wait()
	if got := admitted[0] + admitted[1] + admitted[2]; got != limit {
		t.Fatalf("admitted %v connects, %d in all, want exactly the limit %d", admitted, got, limit)
	}
	s := &Store{db: dynamotest.Client(t), table: f.nodes[0].table}
	pk := counterPK(&sluice.Key{Tenant: "acme", Policy: "conns"})
	out, err := s.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &s.table, Key: key(pk, skCounter), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if u := out.Item[attrUnits].(*types.AttributeValueMemberN).Value; u != "20" {
		t.Errorf("the item's u is %s, want 20", u)
	}
	v, err := decodeItem(out.Item)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		j := slices.IndexFunc(v.state.Entries, func(e algo.Entry) bool { return e.ID == f.lease(i) })
		if j >= 0 && v.state.Entries[j].N != int64(admitted[i]) || j < 0 && admitted[i] != 0 {
			t.Errorf("node %d's lease in the item: %v, want %d units", i, v.state.Entries, admitted[i])
		}
	}
}

// TestAdmissionOldItems: items of the form before the leases' map (the
// state alone) are read as they are, and written in the new form.
func TestAdmissionOldItems(t *testing.T) {
	f := newAdmitFixture(t, 2, 3, 1000)
	now := time.Date(2026, 11, 27, 10, 0, 1, 0, time.UTC)
	if !f.connect(t, 0, now) || !f.connect(t, 1, now) {
		t.Fatal("refused below the limit")
	}
	db := dynamotest.Client(t)
	table := f.nodes[0].table
	pk := counterPK(&sluice.Key{Tenant: "acme", Policy: "conns"})
	if _, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &table, Key: key(pk, skCounter), UpdateExpression: aws.String("REMOVE ls, u"),
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.nodes {
		n.cache = newCache(100) // forget the new form
	}
	// Two units held, in the state alone: one more fits, no more.
	if !f.connect(t, 1, now.Add(time.Millisecond)) {
		t.Fatal("refused below the limit on an old item")
	}
	if f.connect(t, 0, now.Add(2*time.Millisecond)) {
		t.Fatal("admitted past the limit on an old item")
	}
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, Key: key(pk, skCounter), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := out.Item[attrUnits].(*types.AttributeValueMemberN); !ok || u.Value != "3" {
		t.Errorf("the item's u after a write: %v, want 3", out.Item[attrUnits])
	}
	if m, ok := out.Item[attrLeases].(*types.AttributeValueMemberM); !ok || len(m.Value) != 2 {
		t.Errorf("the item's leases after a write: %v, want two", out.Item[attrLeases])
	}
}

// landedAPI passes requests on, but answers the first transaction after
// arm with an error once it has landed, and sends its retry without the
// client request token, as a server that does not honour tokens (or one
// past their ten minutes) would see it.
type landedAPI struct {
	API
	mu     sync.Mutex
	armed  bool
	stripT bool
}

func (a *landedAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	a.mu.Lock()
	armed, strip := a.armed, a.stripT
	a.armed, a.stripT = false, armed
	a.mu.Unlock()
	if strip {
		c := *in
		c.ClientRequestToken = nil
		in = &c
	}
	out, err := a.API.TransactWriteItems(ctx, in, opts...)
	if armed && err == nil {
		return nil, &smithy.GenericAPIError{Code: "InternalServerError", Message: "answer lost"}
	}
	return out, err
}

// TestAdmissionRetryLanded: a transaction on the items' numbers that
// landed unanswered, sent again without its token, is known for this
// node's by its write's id on the items, not counted twice.
func TestAdmissionRetryLanded(t *testing.T) {
	f := newAdmitFixture(t, 2, 100, 1000)
	now := time.Date(2026, 11, 27, 10, 0, 1, 0, time.UTC)
	for c := range 4 {
		if !f.connect(t, c%2, now) {
			t.Fatal("refused below the limit")
		}
	}
	api := &landedAPI{API: f.nodes[1].db}
	f.nodes[1].db = api
	api.mu.Lock()
	api.armed = true
	api.mu.Unlock()
	if !f.connect(t, 1, now.Add(time.Millisecond)) {
		t.Fatal("refused below the limit")
	}
	if api.stripT {
		t.Fatal("the transaction was not sent again")
	}
	db := dynamotest.Client(t)
	table := f.nodes[0].table
	read := func(k sluice.Key) map[string]types.AttributeValue {
		out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, Key: key(counterPK(&k), skCounter), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	if c := read(sluice.Key{Tenant: "acme", Policy: "rate"})[attrCurr].(*types.AttributeValueMemberN).Value; c != "5" {
		t.Errorf("the tenant's window counts %s connects, want 5", c)
	}
	if u := read(sluice.Key{Tenant: "acme", Policy: "conns"})[attrUnits].(*types.AttributeValueMemberN).Value; u != "5" {
		t.Errorf("the tenant's count holds %s units, want 5", u)
	}
}

// TestAdmissionStaleCopyConservative: a node whose copy of the tenant's
// count does not hold another node's lease, expired since or of an owner
// now known dead, finds the count's sum (u) still counting it: its
// condition on the numbers fails, and it decides again on the version,
// from the item, which drops that lease: no refusal below the limit.
func TestAdmissionStaleCopyConservative(t *testing.T) {
	const limit = 4
	now := time.Date(2026, 11, 27, 10, 0, 1, 0, time.UTC)
	t.Run("expired", func(t *testing.T) {
		f := newAdmitFixture(t, 3, limit, 1000)
		if !f.connect(t, 0, now) || !f.connect(t, 0, now) {
			t.Fatal("refused below the limit")
		}
		// Node 2's leases live a second; node 0 does not see them.
		long := f.tenant
		f.tenant.LeaseTTL = time.Second
		if !f.connect(t, 2, now) || !f.connect(t, 2, now) {
			t.Fatal("refused below the limit")
		}
		f.tenant = long
		later := now.Add(2 * time.Second)
		before := f.px.Requests("TransactWriteItems")
		if !f.connect(t, 0, later) {
			t.Fatal("refused below the limit: an expired lease counted")
		}
		if n := f.px.Requests("TransactWriteItems") - before; n != 2 {
			t.Errorf("%d transactions, want 2: the numbers', failed, and the version's", n)
		}
		if !f.connect(t, 1, later) {
			t.Fatal("refused below the limit")
		}
		if f.connect(t, 0, later) || f.connect(t, 1, later) {
			t.Fatal("admitted past the limit")
		}
	})
	t.Run("dead owner", func(t *testing.T) {
		f := newAdmitFixture(t, 2, limit, 1000)
		if !f.connect(t, 0, now) || !f.connect(t, 0, now) || !f.connect(t, 1, now) || !f.connect(t, 1, now) {
			t.Fatal("refused below the limit")
		}
		// Node 0 has not seen node 1's leases; their owner (2) is dead.
		if !f.connect(t, 0, now, 2) || !f.connect(t, 0, now, 2) {
			t.Fatal("refused below the limit: a dead owner's lease counted")
		}
		if f.connect(t, 0, now, 2) {
			t.Fatal("admitted past the limit")
		}
	})
}

// TestRemainingExactUnlessMayLag: a decision whose caller reads Remaining
// as the truth (a fair-share ledger sums the nodes' demand from it) is
// written on the version, so that its Remaining counts every node's units,
// even when this node's copy is stale; one that lets it lag
// (RemainingMayLag) is written on the numbers, in one request.
func TestRemainingExactUnlessMayLag(t *testing.T) {
	f := newAdmitFixture(t, 2, 100, 1000)
	now := time.Now()
	grow := func(i int, units int64, lag bool) sluice.Decision {
		t.Helper()
		ops := []sluice.Op{
			{Key: sluice.Key{Tenant: "acme", Policy: "conns"}, Policy: &f.tenant, Hits: units, Lease: f.lease(i), RemainingMayLag: lag},
			{Key: sluice.Key{Tenant: "acme", Policy: "rate"}, Policy: &f.tenantR, Hits: 1, RemainingMayLag: lag},
		}
		dst := make([]sluice.Decision, len(ops))
		if err := f.nodes[i].Apply(context.Background(), now, ops, dst); err != nil {
			t.Fatal(err)
		}
		if !dst[0].Allowed {
			t.Fatalf("node %d to %d units: denied", i, units)
		}
		return dst[0]
	}
	grow(0, 3, false) // node 0's copy: 3 units
	grow(1, 2, false) // node 1 takes 2: node 0's copy is stale
	if d := grow(0, 4, false); d.Remaining != 100-4-2 {
		t.Fatalf("node 0 grown to 4 beside node 1's 2, Remaining %d, want %d: every node's units", d.Remaining, 100-4-2)
	}
	grow(1, 5, false) // stale again
	before := f.px.Requests("TransactWriteItems")
	grow(0, 6, true)
	if n := f.px.Requests("TransactWriteItems") - before; n != 1 {
		t.Fatalf("a stale copy's decision whose Remaining may lag took %d transactions, want 1", n)
	}
}
