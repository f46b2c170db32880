// Package gateway is Sluice's WebSocket gateway for SaaS tenants (seeds 000
// and 001): connections join a tenant's session after admission against
// four limits, and messages are echoed to their sender and fanned out to
// the session's other connections.
//
// Unlike the AWS sample it replaces: the four connection limits are decided
// all-or-nothing and atomically before the upgrade, and a refusal consumes
// nothing; a connection holds leases that its node renews, so a node that
// dies stops renewing and its connections' counts come back by themselves
// within three renewal periods, never leaking, never going negative;
// deleting a session closes its connections at once, and an expired
// session's connections are closed within a second or two; a connection
// that has gone away is skipped in a fan-out, which goes on.
//
// Admitted messages go through FIFO queues (package queue): "silo", a queue
// and worker per tenant, or "pooled", one queue whose workers serve tenants
// fairly; order is strict within the message group tenant:session. Not yet
// built: fan-out to the session's connections on other nodes.
package gateway
