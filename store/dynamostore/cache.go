package dynamostore

import (
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// cache remembers the last state seen of each key, so that a decision can
// be written without reading first. What it holds may be stale: writes are
// conditioned on its version, so a stale entry costs a retry, never a wrong
// answer. Bounded: at the cap, an arbitrary entry makes room.
type cache struct {
	mu  sync.Mutex
	max int
	m   map[string]versioned
}

func newCache(max int) *cache { return &cache{max: max, m: make(map[string]versioned)} }

func (c *cache) get(k string) (versioned, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *cache) put(k string, v versioned) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = v
}

// Stats counts a store's DynamoDB requests, for measuring round trips and
// write units per decision.
type Stats struct {
	reads, writes, transactions, conflicts, localDenials, writeUnits, leasedLocal atomic.Int64
	writeAttempts, mostAttempts, retries, gaveUp, emptyFailures, lockTimeouts     atomic.Int64
	allotmentWrites                                                               atomic.Int64 // failed or raced
	allotmentFallbacks                                                            atomic.Int64
	contended, batches, batched, combined                                         atomic.Int64
}

// StatsSnapshot is a copy of a store's counts. They only grow, so a
// caller can publish them as counters (MostAttempts as a gauge).
type StatsSnapshot struct {
	// Reads are consistent GetItems; Writes conditional PutItems and
	// UpdateItems; Transactions TransactWriteItems; Conflicts lost
	// conditions; LocalDenials denials answered from remembered state,
	// without a request (the deny cache). WriteUnits estimates the write
	// capacity units consumed: per item written, its size in KiB rounded
	// up, twice in a transaction; a failed condition still costs them.
	Reads, Writes, Transactions, Conflicts, LocalDenials, WriteUnits int64
	// LeasedLocal counts decisions admitted from a leased batch, locally.
	LeasedLocal int64
	// AllotmentWritesLost counts writes of a region's allotment item that
	// failed or lost to another node of the region (multi-region mode):
	// the node decided from the items as read, and tries again later.
	AllotmentWritesLost int64
	// AllotmentFallbacks counts decisions whose node could not read the
	// key's allotment items and decided against the allotment its copy
	// vouched for (multi-region mode).
	AllotmentFallbacks int64
	// WriteAttempts counts the write requests of decisions, releases and
	// renewals, every try included. Contended counts those among them
	// sent again after a write lost to another node's, which are bounded
	// by the deadline, not by Options.MaxAttempts; the others are at most
	// Options.MaxAttempts a decision (or batch), and MostAttempts is the
	// most any one made.
	WriteAttempts, Contended, MostAttempts int64
	// Retries counts write requests sent again after a throttle, a
	// transaction conflict or a lost answer; GaveUp the decisions failed
	// (KindUnavailable) for want of attempts or of time.
	Retries, GaveUp int64
	// EmptyFailures counts failed conditions that returned no item,
	// each answered by a consistent read (counted in Reads).
	EmptyFailures int64
	// LockTimeouts counts decisions whose deadline passed while they
	// waited for this node's other decisions on the same key.
	LockTimeouts int64
	// Batches counts the batches of single-key decisions decided
	// together (combine.go), each in one write, or none if they were all
	// denied; Batched the decisions in them; Combined those decided in a
	// batch of more than one.
	Batches, Batched, Combined int64
}

// Stats returns the store's counts so far.
func (s *Store) Stats() StatsSnapshot {
	st := &s.stats
	return StatsSnapshot{
		Reads: st.reads.Load(), Writes: st.writes.Load(), Transactions: st.transactions.Load(),
		Conflicts: st.conflicts.Load(), LocalDenials: st.localDenials.Load(), WriteUnits: st.writeUnits.Load(),
		LeasedLocal: st.leasedLocal.Load(), WriteAttempts: st.writeAttempts.Load(), MostAttempts: st.mostAttempts.Load(),
		Retries: st.retries.Load(), GaveUp: st.gaveUp.Load(), EmptyFailures: st.emptyFailures.Load(),
		LockTimeouts: st.lockTimeouts.Load(), AllotmentWritesLost: st.allotmentWrites.Load(),
		AllotmentFallbacks: st.allotmentFallbacks.Load(),
		Contended:          st.contended.Load(), Batches: st.batches.Load(), Batched: st.batched.Load(), Combined: st.combined.Load(),
	}
}

// writeUnits estimates the write units of putting item: its size (names and
// values) in KiB, rounded up, as DynamoDB bills a write.
func writeUnits(item map[string]types.AttributeValue) int64 {
	size := 0
	for name, v := range item {
		size += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			size += len(v.Value)
		case *types.AttributeValueMemberB:
			size += len(v.Value)
		case *types.AttributeValueMemberN:
			size += len(v.Value)/2 + 1
		}
	}
	return int64((size + 1023) / 1024)
}
