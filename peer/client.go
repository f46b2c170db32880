package peer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/wire"
)

// Client reaches other nodes through their HTTP APIs, with the admin key
// the nodes share, marking every call forwarded (ForwardedHeader) so that
// the other node answers for its own connections and counts only. It is
// the gateway's Peer, and the Cluster's way to another node's dashboard
// routes. Safe for concurrent use.
type Client struct {
	key    string
	client *http.Client
	// MaxBody bounds an answer read; zero: 1 MiB. Set it before use.
	MaxBody int64

	mu       sync.Mutex
	inflight map[string]int // deliveries under way, per node (MaxInFlight)
}

var _ gateway.Peer = (*Client)(nil)

// MaxInFlight bounds the deliveries (Client.Deliver) under way to one
// node: one more fails at once (errBusy), and the gateway's queue makes
// that node's delivery again later, as for a node that cannot be reached,
// so that a node that hangs holds at most this many of the workers, each
// for its WriteTimeout, never the deliveries to other nodes. It is also
// the most connections kept open to a node.
const MaxInFlight = 64

// errBusy refuses a delivery to a node with MaxInFlight under way.
var errBusy = &sluice.Error{Kind: sluice.KindUnavailable, Message: "peer: too many deliveries under way to the node"}

// NewClient returns a client presenting adminKey (none if empty), whose
// calls each take at most 10 seconds, over connections kept open to each
// node (up to MaxInFlight, dialled in at most 2 seconds).
func NewClient(adminKey string) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConnsPerHost = MaxInFlight
	t.MaxConnsPerHost = MaxInFlight
	return &Client{key: adminKey, client: &http.Client{Timeout: 10 * time.Second, Transport: t}, inflight: map[string]int{}}
}

// call makes one management call on a connection and decodes a 200's body
// into out; an error answer is the other node's error, of its kind (410:
// gateway.ErrGone).
func (c *Client) call(ctx context.Context, method, node, tenant, conn, query string, body []byte, out any) error {
	return c.do(ctx, method, node+"/v1/tenants/"+url.PathEscape(tenant)+"/connections/"+url.PathEscape(conn), query, body, out)
}

func (c *Client) do(ctx context.Context, method, u, query string, body []byte, out any) error {
	return c.doHeader(ctx, method, u, query, nil, body, out)
}

func (c *Client) doHeader(ctx context.Context, method, u, query string, header http.Header, body []byte, out any) error {
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	maps.Copy(req.Header, header)
	req.Header.Set("Content-Type", cmp.Or(req.Header.Get("Content-Type"), "application/json"))
	req.Header.Set(ForwardedHeader, "1")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, cmp.Or(c.MaxBody, 1<<20)))
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if out != nil {
			return json.Unmarshal(b, out)
		}
		return nil
	case http.StatusGone:
		return gateway.ErrGone
	}
	return wire.ParseError("peer "+req.URL.Host, resp.StatusCode, b)
}

// Post implements gateway.Peer.
func (c *Client) Post(ctx context.Context, node, tenant, conn string, data []byte) error {
	return c.call(ctx, http.MethodPost, node, tenant, conn, "", data, nil)
}

// Info implements gateway.Peer.
func (c *Client) Info(ctx context.Context, node, tenant, conn string) (gateway.ConnectionInfo, error) {
	var info gateway.ConnectionInfo
	err := c.call(ctx, http.MethodGet, node, tenant, conn, "", nil, &info)
	return info, err
}

// Close implements gateway.Peer.
func (c *Client) Close(ctx context.Context, node, tenant, conn string, code websocket.StatusCode, reason string) error {
	q := url.Values{"reason": {reason}}
	if code != websocket.StatusNormalClosure {
		q.Set("code", strconv.Itoa(int(code)))
	}
	return c.call(ctx, http.MethodDelete, node, tenant, conn, q.Encode(), nil, nil)
}

// Deliver implements gateway.Peer: one call, POST
// /v1/tenants/{t}/sessions/{s}/deliver, whose body is the frames one after
// another, their lengths in DeliveryFramesHeader and the message's id in
// DeliveryIDHeader. With MaxInFlight deliveries under way to node, it
// fails at once (errBusy).
func (c *Client) Deliver(ctx context.Context, node, tenant, session, id string, frames ...[]byte) error {
	c.mu.Lock()
	if c.inflight[node] >= MaxInFlight {
		c.mu.Unlock()
		return errBusy
	}
	c.inflight[node]++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.inflight[node]--; c.inflight[node] == 0 {
			delete(c.inflight, node)
		}
		c.mu.Unlock()
	}()
	lens := make([]string, len(frames))
	for i, f := range frames {
		lens[i] = strconv.Itoa(len(f))
	}
	h := http.Header{}
	h.Set("Content-Type", "application/octet-stream")
	h.Set(DeliveryIDHeader, id)
	h.Set(DeliveryFramesHeader, strings.Join(lens, ","))
	return c.doHeader(ctx, http.MethodPost, node+"/v1/tenants/"+url.PathEscape(tenant)+"/sessions/"+url.PathEscape(session)+"/deliver", "", h, bytes.Join(frames, nil), nil)
}

// Changed implements gateway.Peer.
func (c *Client) Changed(ctx context.Context, node, tenant, session string, newNode bool) error {
	q := ""
	if newNode {
		q = "?node=new"
	}
	return c.do(ctx, http.MethodPost, node+"/v1/tenants/"+url.PathEscape(tenant)+"/sessions/"+url.PathEscape(session)+"/changed"+q, "", nil, nil)
}

// SessionGone implements gateway.Peer.
func (c *Client) SessionGone(ctx context.Context, node, tenant, session string) error {
	return c.do(ctx, http.MethodPost, node+"/v1/tenants/"+url.PathEscape(tenant)+"/sessions/"+url.PathEscape(session)+"/gone", "", nil, nil)
}

// Get asks node (its base URL) for pathAndQuery, answered by that node
// alone, and returns the body of its 200, which must be JSON; an error
// answer is the node's error, of its kind.
func (c *Client) Get(ctx context.Context, node, pathAndQuery string) ([]byte, error) {
	path, query, _ := strings.Cut(pathAndQuery, "?")
	var body json.RawMessage
	if err := c.do(ctx, http.MethodGet, node+path, query, nil, &body); err != nil {
		return nil, err
	}
	return body, nil
}
