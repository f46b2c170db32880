// Package gateway is Sluice's WebSocket gateway for SaaS tenants (seeds 000
// and 001): a client connects to a tenant's session, and each message it
// sends is echoed to it and fanned out to the session's other connections,
// on this node and on the others.
//
// A connect (ServeHTTP) is admitted against four limits of its tenant's
// settings, its tenant's and its session's connections and connects per
// minute, all or nothing and atomically before the upgrade; a refusal
// consumes nothing. A node counts its connections of a tenant, and of a
// session, in one lease each, which it renews: a node that dies stops
// renewing, and its connections' counts come back by themselves within
// three renewal periods, never leaking, never going negative.
//
// A message is checked against its tenant's message limit and goes through
// a FIFO queue (package queue): "silo", a queue and worker per tenant, or
// "pooled", one queue whose workers serve tenants fairly; order is strict
// within the message group tenant:session, and an id the session sent in
// the last five minutes is not delivered again. The queues' consumer puts
// the message's echo in its sender's outbox, and the message and its reply
// in those of the session's other connections on this node, never waiting
// for one (a client that falls a whole outbox behind is closed); it posts
// the two through Options.Peer to the session's connections on other nodes,
// as Options.Registry lists them. A connection gone is skipped and the
// fan-out goes on; a node that cannot be reached fails the delivery, which
// the queue makes again for the connections not reached yet, up to five
// times in all, and then tells the sender.
//
// Deleting a session closes its connections at once, on this node and,
// through Options.Peer, on the others (a node not reached finds the
// deletion within Options.CheckEvery); deleting a tenant, at once on this
// node and within a sweep or two on the others. A sweep every
// Options.ExpiryEvery closes the connections of expired sessions and
// deleted tenants, and those idle or too old. The management API
// (PostToConnection, ConnectionInfo, CloseConnection) reaches a connection
// through any node, which forwards the call to the node that holds it.
// Without a Registry and a Peer, a gateway is a single node. A Gateway is
// safe for concurrent use.
package gateway
