package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sluicehq/sluice"
)

// Retries of a decision's writes are the store's, not the SDK's: every
// write request of a decision that follows a fault (a retry of a
// throttled, conflicting or unanswered request) counts against
// Options.MaxAttempts, the first request too, so that a fault costs a
// decision at most that many writes whatever happens, and the store, which
// knows the write's id and condition, decides what a retry means. A write
// lost to another node's is not a fault: the request that decides again
// from the item that won is counted apart (Stats.Contended), bounded by
// the decision's deadline, and each node sends one write of a key at a
// time (combine.go), so that only nodes contend. The SDK's retryer is
// switched off for these requests (noRetry); it still retries the store's
// reads and its tenant, session and registry requests, by its own rules
// (throttling, 5xx, broken connections; not TransactionConflictException).

// noRetry is the per-request option that makes the SDK send a decision's
// write once.
func noRetry(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }

// Backoff between retries: full jitter over an exponential ceiling.
const (
	backoffBase = 5 * time.Millisecond
	backoffMax  = 200 * time.Millisecond
)

// budget is one decision's write attempts (or one batch's: combine.go):
// it counts those that follow faults against the cap, and spaces the
// retries that need it.
type budget struct {
	s         *Store
	sent      int  // write requests counted against the cap
	contended bool // the next request follows a write lost to another node's: not counted
	pause     bool // the next request waits a backoff first
	retries   int  // backoffs so far, for the ceiling
	last      error
}

func (s *Store) budget() *budget { return &budget{s: s} }

// take is called before each write request of the decision. It waits the
// backoff the last fault called for, within ctx, and fails the decision
// (KindUnavailable) when the attempts are spent or the deadline leaves no
// time for the wait.
func (b *budget) take(ctx context.Context, op string) error {
	if !b.contended && b.sent >= b.s.max {
		b.s.stats.gaveUp.Add(1)
		msg := fmt.Sprintf("no agreement after %d write attempts", b.sent)
		if b.last != nil {
			msg = fmt.Sprintf("gave up after %d write attempts", b.sent)
		}
		return &sluice.Error{Op: "dynamostore." + op, Kind: sluice.KindUnavailable, Message: msg, Err: b.last}
	}
	if b.pause {
		ceil := min(backoffMax, backoffBase<<min(b.retries, 10))
		d := time.Duration(rand.Int64N(int64(ceil)) + 1)
		b.retries++
		b.pause = false
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			b.s.stats.gaveUp.Add(1)
			return &sluice.Error{Op: "dynamostore." + op, Kind: sluice.KindUnavailable, Message: "no time left to retry", Err: b.last}
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			b.s.stats.gaveUp.Add(1)
			return &sluice.Error{Op: "dynamostore." + op, Kind: sluice.KindUnavailable, Err: ctx.Err()}
		}
	}
	if err := ctx.Err(); err != nil {
		return &sluice.Error{Op: "dynamostore." + op, Kind: sluice.KindUnavailable, Err: err}
	}
	b.s.stats.writeAttempts.Add(1)
	if b.contended {
		b.contended = false
		b.s.stats.contended.Add(1)
		return nil
	}
	b.sent++
	for {
		most := b.s.stats.mostAttempts.Load()
		if int64(b.sent) <= most || b.s.stats.mostAttempts.CompareAndSwap(most, int64(b.sent)) {
			break
		}
	}
	return nil
}

// lost records a conditional write of the decision lost. If the item
// changed since the state the write was conditioned on, another node
// wrote: contention, not a fault. The next try goes at once, from the
// state the failure returned, the freshest there is (after a wait it would
// be stale, and lose again to the nodes that did not wait), and is not
// counted against the cap: each loss is another node's success, so the
// nodes take the key in turns, each write's chance as good as the next
// node's, and a node writes one batch of a key at a time, so that each
// success costs each other node at most one lost write. A condition that
// failed on an item that did not change is no race with anyone: a fault,
// counted, after a backoff.
func (b *budget) lost(changed bool) {
	if changed {
		b.contended = true
		return
	}
	b.pause = true
}

// failed records a request that failed with err, and reports whether it is
// worth sending again: throttled, conflicting with a transaction, or not
// answered. The next try waits a backoff.
func (b *budget) failed(ctx context.Context, err error) bool {
	b.last = err
	if ctx.Err() != nil || !retryable(err) {
		return false
	}
	b.s.stats.retries.Add(1)
	b.pause = true
	return true
}

// throttleCodes are the errors of a request DynamoDB refused for now: sent
// again after a backoff, it may succeed.
var throttleCodes = map[string]bool{
	"ThrottlingException":                    true,
	"ProvisionedThroughputExceededException": true,
	"RequestLimitExceeded":                   true,
	"TransactionConflictException":           true,
	"TransactionInProgressException":         true,
	"InternalServerError":                    true,
	"ServiceUnavailable":                     true,
}

// cancelRetryable are the cancellation reasons of a transaction that may
// succeed if sent again.
var cancelRetryable = map[string]bool{
	"TransactionConflict":           true,
	"ThrottlingError":               true,
	"ProvisionedThroughputExceeded": true,
}

// retryable reports whether a write that failed with err may be sent again
// as it is. A request whose answer was lost may have landed: the write's id
// tells on the retry (see put and gcra).
func retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		return transactionRetryable(tce)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		return throttleCodes[api.ErrorCode()]
	}
	if (retry.RetryableConnectionError{}).IsErrorRetryable(err) == aws.TrueTernary {
		return true
	}
	var status interface{ HTTPStatusCode() int }
	return errors.As(err, &status) && status.HTTPStatusCode() >= 500
}

// transactionRetryable reports whether a cancelled transaction was
// cancelled only for reasons that may pass on a retry (no condition failed).
func transactionRetryable(tce *types.TransactionCanceledException) bool {
	some := false
	for _, r := range tce.CancellationReasons {
		c := aws.ToString(r.Code)
		switch {
		case c == "" || c == "None":
		case cancelRetryable[c]:
			some = true
		default:
			return false
		}
	}
	return some
}
