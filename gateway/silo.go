package gateway

import (
	"time"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/wire"
)

// The silo queues: a queue and one worker per tenant with messages lately,
// made on its first message and released by the expiry sweep once idle,
// beside the pooled queue that every tenant shares (made by New). Every
// queue delivers through Gateway.deliver.

// silo returns the tenant's queue, made on its first message.
func (g *Gateway) silo(tenant string) *queue.Queue {
	g.silosMu.Lock()
	defer g.silosMu.Unlock()
	q := g.silos[tenant]
	if q == nil && g.silos != nil {
		q = queue.New(g.queueOptions(queue.Options{Capacity: g.opts.QueueCapacity, Workers: 1}), g.deliver)
		g.silos[tenant] = q
	}
	return q
}

// releaseIdleSilos closes the silo queues, and stops the workers, of the
// tenants that have nothing waiting nor in flight; a tenant's next message
// makes its queue anew. An idle queue has no message in flight, so no
// message of a group can overtake another across the two.
func (g *Gateway) releaseIdleSilos() {
	var idle []*queue.Queue
	g.silosMu.Lock()
	for tenant, q := range g.silos {
		if q.CloseIfIdle() {
			delete(g.silos, tenant)
			idle = append(idle, q)
		}
	}
	g.silosMu.Unlock()
	for _, q := range idle {
		q.Close() // waits for its worker, not holding g.silosMu
	}
}

// queueOptions fills the options every queue of the gateway shares.
func (g *Gateway) queueOptions(o queue.Options) queue.Options {
	o.Dedup, o.Now, o.VisibilityTimeout = g.dedup, g.opts.Now, g.opts.VisibilityTimeout
	// Five deliveries, 1, 2, 4 and 8 fifteenths of deadWithin apart: by
	// the last, a dead node's registrations are passed over, and it is no
	// longer delivered to.
	o.MaxReceives, o.RetryDelay = 5, max(g.deadWithin()/15, time.Millisecond)
	o.DeadLetter = func(m queue.Message, err error) {
		j := m.Body.(job)
		g.log.Warn("gateway: message dropped after its deliveries failed", "tenant", m.Tenant, "receives", m.Receives, "err", err)
		j.from.send(mustJSON(wire.WSNotice{Error: wire.WSUndelivered, Message: "the message could not be delivered to every connection of the session", ID: &j.f.ID}))
	}
	return o
}
