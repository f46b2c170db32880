package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGroupOrderUnderConcurrentSenders: 8 senders share 4 groups; with 4
// workers, every group's messages are handled in the order they were
// enqueued, never two of a group at once.
func TestGroupOrderUnderConcurrentSenders(t *testing.T) {
	var mu sync.Mutex
	enqueued := map[string][]int{}
	handled := map[string][]int{}
	var inFlight sync.Map
	var violations atomic.Int64
	q := New(Options{Workers: 4}, func(ctx context.Context, m Message) error {
		n, _ := inFlight.LoadOrStore(m.Group, new(atomic.Int64))
		if n.(*atomic.Int64).Add(1) > 1 {
			violations.Add(1)
		}
		// Handling takes real time, unevenly, so that the workers
		// overlap and interleave: a wait for wall time, not a handshake.
		time.Sleep(time.Duration(m.Body.(int)%3) * 100 * time.Microsecond)
		mu.Lock()
		handled[m.Group] = append(handled[m.Group], m.Body.(int))
		mu.Unlock()
		n.(*atomic.Int64).Add(-1)
		return nil
	})
	var seq atomic.Int64
	var wg sync.WaitGroup
	for s := range 8 {
		wg.Go(func() {
			for range 200 {
				g := fmt.Sprintf("acme:s%d", s%4)
				// Number and enqueue under one lock, so that the
				// enqueue order of a group is known.
				mu.Lock()
				n := int(seq.Add(1))
				if err := q.Enqueue(Message{Tenant: "acme", Group: g, Body: n}); err != nil {
					mu.Unlock()
					t.Error(err)
					return
				}
				enqueued[g] = append(enqueued[g], n)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return total(handled) == 1600 })
	q.Close()
	for g, want := range enqueued {
		got := handled[g]
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("group %s: handled %v..., enqueued %v...", g, got[:i+1], want[:i+1])
			}
		}
	}
	if violations.Load() > 0 {
		t.Fatalf("%d times two messages of a group were in flight", violations.Load())
	}
}

func total(m map[string][]int) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

// TestFairAcrossTenants: a tenant that floods the pooled queue does not
// starve another: with one worker, the quiet tenant's messages are handled
// in turn with the busy one's.
func TestFairAcrossTenants(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	q := New(Options{Workers: 1}, func(ctx context.Context, m Message) error {
		<-release
		mu.Lock()
		order = append(order, m.Tenant)
		mu.Unlock()
		return nil
	})
	for i := range 500 {
		q.Enqueue(Message{Tenant: "busy", Group: fmt.Sprint("busy:", i%10), Body: i})
	}
	for i := range 10 {
		q.Enqueue(Message{Tenant: "quiet", Group: "quiet:s", Body: i})
	}
	close(release)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 510 })
	q.Close()
	last := 0
	for i, tenant := range order {
		if tenant == "quiet" {
			last = i
		}
	}
	if last > 25 {
		t.Fatalf("the quiet tenant's last message was handled %dth of 510", last+1)
	}
}

func TestDedupAndBounds(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	block := make(chan struct{})
	q := New(Options{Capacity: 3, Now: clock}, func(ctx context.Context, m Message) error { <-block; return nil })
	defer func() { close(block); q.Close() }()
	if err := q.Enqueue(Message{Tenant: "a", Group: "a:s", ID: "m1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return q.Len() == 0 }) // in flight, blocked
	if err := q.Enqueue(Message{Tenant: "a", Group: "a:s", ID: "m1"}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("same id again: %v", err)
	}
	if err := q.Enqueue(Message{Tenant: "b", Group: "b:s", ID: "m1"}); err != nil {
		t.Fatalf("another tenant's id: %v", err)
	}
	// Ids are a group's own: another session cannot suppress these.
	if err := q.Enqueue(Message{Tenant: "a", Group: "a:other", ID: "m1"}); err != nil {
		t.Fatalf("another group's id: %v", err)
	}
	mu.Lock()
	now = now.Add(5 * time.Minute)
	mu.Unlock()
	if err := q.Enqueue(Message{Tenant: "a", Group: "a:s", ID: "m1"}); err != nil {
		t.Fatalf("same id after the window: %v", err)
	}
	// The first message is in flight, blocked; the other 3 wait: full.
	waitFor(t, func() bool { return q.Len() == 3 })
	if err := q.Enqueue(Message{Tenant: "a", Group: "a:s"}); !errors.Is(err, ErrFull) {
		t.Fatalf("past capacity: %v", err)
	}
}

func TestCloseStopsWorkers(t *testing.T) {
	q := New(Options{Workers: 3}, func(ctx context.Context, m Message) error { return nil })
	for i := range 10 {
		q.Enqueue(Message{Tenant: "a", Group: fmt.Sprint(i)})
	}
	q.Close()
	if err := q.Enqueue(Message{Tenant: "a"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// waitFor polls cond until it holds, and fails the test if it does not
// within a generous deadline: the machines that run the tests are shared.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	const patience = 30 * time.Second
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v", patience)
		}
		time.Sleep(time.Millisecond) // the poll's period, not a handshake
	}
}

// TestTenantCapacityAndSharedDedup: one tenant cannot fill a shared queue;
// queues sharing a Dedup refuse an id any of them has seen.
func TestTenantCapacityAndSharedDedup(t *testing.T) {
	block := make(chan struct{})
	d := NewDedup(time.Minute, 100)
	q := New(Options{Capacity: 10, TenantCapacity: 3, Dedup: d}, func(ctx context.Context, m Message) error { <-block; return nil })
	other := New(Options{Dedup: d}, func(ctx context.Context, m Message) error { return nil })
	defer func() { close(block); q.Close(); other.Close() }()
	for i := range 5 {
		err := q.Enqueue(Message{Tenant: "busy", Group: fmt.Sprint("busy:", i)})
		if i == 0 {
			waitFor(t, func() bool { return q.Len() == 0 }) // in flight, blocked
		}
		if i <= 3 && err != nil { // one in flight, three waiting
			t.Fatalf("message %d: %v", i, err)
		}
		if i == 4 && !errors.Is(err, ErrFull) {
			t.Fatalf("past the tenant's capacity: %v", err)
		}
	}
	if err := q.Enqueue(Message{Tenant: "quiet", Group: "quiet:s"}); err != nil {
		t.Fatalf("another tenant refused: %v", err)
	}
	if err := q.Enqueue(Message{Tenant: "quiet", Group: "quiet:s", ID: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := other.Enqueue(Message{Tenant: "quiet", Group: "quiet:s", ID: "x"}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("the other queue took a seen id: %v", err)
	}
}

// TestHungHandlerRedelivered: a handler that hangs on a message past the
// visibility timeout has the message delivered again, first of its group,
// and the group moves on in order; the hung delivery's context is
// cancelled.
func TestHungHandlerRedelivered(t *testing.T) {
	var mu sync.Mutex
	var handled []string
	cancelled := make(chan struct{})
	q := New(Options{VisibilityTimeout: 20 * time.Millisecond}, func(ctx context.Context, m Message) error {
		if m.Body == "first" && m.Receives == 1 {
			<-ctx.Done() // hangs until the visibility timeout
			close(cancelled)
			return ctx.Err()
		}
		mu.Lock()
		handled = append(handled, fmt.Sprintf("%v#%d", m.Body, m.Receives))
		mu.Unlock()
		return nil
	})
	defer q.Close()
	for _, b := range []string{"first", "second"} {
		if err := q.Enqueue(Message{Tenant: "acme", Group: "acme:s", Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 2 })
	<-cancelled
	if handled[0] != "first#2" || handled[1] != "second#1" {
		t.Fatalf("handled %v, want the hung message again, then the next", handled)
	}
}

// TestFailedDeliveryRetriedThenDeadLettered: a failed delivery is retried;
// one that fails every time is dropped after MaxReceives, told to the dead
// letter, and its group moves on.
func TestFailedDeliveryRetriedThenDeadLettered(t *testing.T) {
	var mu sync.Mutex
	receives := map[string]int{}
	var handled []string
	dead := make(chan Message, 1)
	q := New(Options{MaxReceives: 3, DeadLetter: func(m Message, err error) { dead <- m }}, func(ctx context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		receives[m.Body.(string)]++
		switch {
		case m.Body == "poison":
			return errors.New("always fails")
		case m.Body == "flaky" && m.Receives == 1:
			return errors.New("fails once")
		}
		handled = append(handled, m.Body.(string))
		return nil
	})
	defer q.Close()
	for _, b := range []string{"flaky", "poison", "after"} {
		q.Enqueue(Message{Tenant: "acme", Group: "acme:s", Body: b})
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if handled[0] != "flaky" || handled[1] != "after" || receives["flaky"] != 2 || receives["poison"] != 3 {
		t.Fatalf("handled %v with receives %v", handled, receives)
	}
	if m := <-dead; m.Body != "poison" || m.Receives != 3 {
		t.Fatalf("dead letter %+v", m)
	}
}

// TestCloseIfIdle: a queue with nothing waiting nor in flight closes, and
// refuses what comes after; a busy one does not.
func TestCloseIfIdle(t *testing.T) {
	block := make(chan struct{})
	q := New(Options{}, func(ctx context.Context, m Message) error { <-block; return nil })
	q.Enqueue(Message{Tenant: "acme", Group: "g", Body: 1})
	if q.CloseIfIdle() {
		t.Fatal("a busy queue closed")
	}
	close(block)
	waitFor(t, func() bool { return q.CloseIfIdle() })
	q.Close() // waits for the workers
	if err := q.Enqueue(Message{Tenant: "acme", Group: "g"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("enqueue after an idle close: %v", err)
	}
}

// TestRetryWaitsAndHoldsItsGroup: a failed delivery goes again only after
// the retry delay, and its group waits with it while other groups go on.
func TestRetryWaitsAndHoldsItsGroup(t *testing.T) {
	var mu sync.Mutex
	var handled []string
	var failedAt, retriedAt time.Time
	q := New(Options{RetryDelay: 50 * time.Millisecond}, func(ctx context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Body == "a1" && m.Receives == 1 {
			failedAt = time.Now()
			return errors.New("fails once")
		}
		if m.Body == "a1" {
			retriedAt = time.Now()
		}
		handled = append(handled, m.Body.(string))
		return nil
	})
	defer q.Close()
	for _, m := range []Message{{Group: "a", Body: "a1"}, {Group: "a", Body: "a2"}, {Group: "b", Body: "b1"}} {
		m.Tenant = "acme"
		q.Enqueue(m)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 3 })
	mu.Lock()
	defer mu.Unlock()
	if handled[0] != "b1" || handled[1] != "a1" || handled[2] != "a2" {
		t.Fatalf("handled %v, want b1 while a waits, then a1, a2", handled)
	}
	if wait := retriedAt.Sub(failedAt); wait < 50*time.Millisecond {
		t.Fatalf("retried after %v, before the delay of 50ms", wait)
	}
}
