package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/wire"
)

// peer reaches connections on other nodes through their management API,
// with the admin key the nodes share, marking every call forwarded so
// that the other node answers for its own connections only.
type peer struct {
	key    string
	client *http.Client
	// maxBody bounds an answer read; default 1 MiB.
	maxBody int64
}

var _ gateway.Peer = (*peer)(nil)

func newPeer(adminKey string) *peer {
	return &peer{key: adminKey, client: &http.Client{Timeout: 10 * time.Second}}
}

// call makes one management call on a connection and decodes a 200's body
// into out; an error answer is the other node's error, of its kind (410:
// gateway.ErrGone).
func (p *peer) call(ctx context.Context, method, node, tenant, conn, query string, body []byte, out any) error {
	return p.do(ctx, method, node+"/v1/tenants/"+url.PathEscape(tenant)+"/connections/"+url.PathEscape(conn), query, body, out)
}

func (p *peer) do(ctx context.Context, method, u, query string, body []byte, out any) error {
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpapi.ForwardedHeader, "1")
	if p.key != "" {
		req.Header.Set("Authorization", "Bearer "+p.key)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, cmp.Or(p.maxBody, 1<<20)))
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
func (p *peer) Post(ctx context.Context, node, tenant, conn string, data []byte) error {
	return p.call(ctx, http.MethodPost, node, tenant, conn, "", data, nil)
}

// Info implements gateway.Peer.
func (p *peer) Info(ctx context.Context, node, tenant, conn string) (gateway.ConnectionInfo, error) {
	var info gateway.ConnectionInfo
	err := p.call(ctx, http.MethodGet, node, tenant, conn, "", nil, &info)
	return info, err
}

// Close implements gateway.Peer.
func (p *peer) Close(ctx context.Context, node, tenant, conn string, code websocket.StatusCode, reason string) error {
	q := url.Values{"reason": {reason}}
	if code != websocket.StatusNormalClosure {
		q.Set("code", strconv.Itoa(int(code)))
	}
	return p.call(ctx, http.MethodDelete, node, tenant, conn, q.Encode(), nil, nil)
}

// Changed implements gateway.Peer.
func (p *peer) Changed(ctx context.Context, node, tenant, session string, newNode bool) error {
	q := ""
	if newNode {
		q = "?node=new"
	}
	return p.do(ctx, http.MethodPost, node+"/v1/tenants/"+url.PathEscape(tenant)+"/sessions/"+url.PathEscape(session)+"/changed"+q, "", nil, nil)
}
