// Package peer is the node-to-node protocol, both halves, as wtf's
// http/dial.go keeps a service's handlers and its client together. The
// nodes of a shared store reach one another over their HTTP APIs, with
// the admin key they share:
//
//   - The server half (Mount): the connection management API (API
//     Gateway's @connections), which a client calls on any node and a
//     node forwards to the node holding the connection, the call by
//     which a node tells another that a session has a new connection,
//     and the one by which it gives another a message for all that
//     node's connections of a session (once per node, not per
//     connection).
//   - The client half (Client): those calls, and the dashboard's routes,
//     made on another node, every one marked forwarded (ForwardedHeader)
//     so that the other node answers for itself alone and no call goes
//     round.
//   - The cluster (Cluster): this node announced in the shared store, the
//     others listed, and asked at once for a dashboard route (Gather),
//     whose answers the route sums with its own.
package peer

import "net/http"

// ForwardedHeader marks a call one node makes on another: a management
// call forwarded to the node that holds the connection, or a dashboard
// route asked of every node. That node answers for its own connections
// and counts only, so that no call goes round.
const ForwardedHeader = "Sluice-Forwarded"

// Forwarded reports whether r is another node's call (ForwardedHeader),
// to be answered by this node alone.
func Forwarded(r *http.Request) bool { return r.Header.Get(ForwardedHeader) != "" }
