// Package forward sends a tenant's call on to a third party at the moment
// fair sharing grants it: the proxy mode of an upstream quota (package
// fairshare), in which a customer calls Sluice and Sluice calls the third
// party, so that Sluice's pacing holds where calls are sent, not where they
// are granted.
//
// The third party's address is the operator's (Target.URL, from the
// configuration), never the caller's: a caller names a path under it,
// which Path checks segment by segment, and the scheme and host are
// always the target's. Only a safe set of the caller's headers is
// forwarded (never its Authorization, which is Sluice's, nor its cookies,
// nor hop-by-hop headers); the target's own headers, such as the third
// party's credentials, are added by Sluice. Request bodies, response
// bodies, the call's time and the calls in flight are bounded.
//
// The bound on arrivals: the scheduler grants at most Rate units in any
// interval of its window lengthened by the upstream's margin, and a
// Forwarder starts each send within half the margin of its grant, or does
// not send it at all (wire.ProxySlotMissed). So the third party sees at
// most Rate units in any interval of its Window whenever the network's
// delay from Sluice to it (a connection's dial and handshake, the bytes'
// travel) varies by at most the other half of the margin.
//
// A Forwarder is safe for concurrent use.
package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// Target is an upstream's address and what may pass to it. Zero fields
// take the defaults stated.
type Target struct {
	// Name is the upstream's name, in answers and errors.
	Name string
	// URL is the base every call goes under: http or https, a host, a
	// path; no user, query or fragment. Required.
	URL *url.URL
	// Margin is the upstream's margin (the scheduler's window is longer
	// by it): a send starts within Margin/2 of its grant, or is not sent.
	// Required, positive.
	Margin time.Duration
	// Timeout bounds a call from its send to its response's last byte.
	// Default 30s.
	Timeout time.Duration
	// MaxBody bounds a call's request body, in bytes: a larger one is
	// refused 413 before it waits. Default 1 MiB.
	MaxBody int64
	// MaxResponse bounds the response body passed back, in bytes: a larger
	// one with its length declared answers 502; one without is cut off
	// (the connection to the caller is aborted). Default 10 MiB.
	MaxResponse int64
	// Headers are set on every call, replacing any of the caller's: the
	// third party's credentials, for instance.
	Headers http.Header
	// Forward names the caller's headers passed on besides DefaultForward;
	// none of Never.
	Forward []string
	// MaxConcurrent bounds the calls to the upstream in flight on this
	// server, from their arrival (their wait included) to their answer's
	// end; MaxPerTenant those of one tenant. Defaults 256 and 64.
	MaxConcurrent int
	MaxPerTenant  int
	// Logger receives what the proxy cannot answer (an answer cut off at
	// its bound). Default: discard.
	Logger *slog.Logger
	// Transport sends the calls. Default: an http.Transport of its own
	// that keeps up to MaxConcurrent idle connections to the host, so that
	// sends rarely wait on a dial.
	Transport http.RoundTripper
}

// Defaults.
const (
	DefaultTimeout       = 30 * time.Second
	DefaultMaxBody       = 1 << 20
	DefaultMaxResponse   = 10 << 20
	DefaultMaxConcurrent = 256
	DefaultMaxPerTenant  = 64
)

// DefaultForward are the caller's headers a call carries on: what it
// accepts, what its body is, and its conditions.
var DefaultForward = []string{
	"Accept", "Accept-Encoding", "Accept-Language", "Content-Type", "Content-Encoding", "Content-Language",
	"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range", "Range",
	"User-Agent", "X-Request-Id",
}

// Never are the headers a call never carries from its caller, whatever
// Forward says: Sluice's own credentials and parameters, the caller's
// cookies, proxy and forwarding headers, and hop-by-hop headers.
var Never = []string{
	"Authorization", "Proxy-Authorization", "Cookie", "Host", "Forwarded", "X-Forwarded-For",
	"X-Forwarded-Host", "X-Forwarded-Proto", "Connection", "Keep-Alive", "Proxy-Connection", "Te",
	"Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Expect",
	wire.HeaderTenant, wire.HeaderKey, wire.HeaderCost, wire.HeaderMaxWait,
}

// never reports whether header name is one of Never, or Sluice's.
func never(name string) bool {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return slices.Contains(Never, name) || strings.HasPrefix(name, "Sluice-") || strings.HasPrefix(name, "Proxy-")
}

// Check reports the first fault of t's fields that New would refuse.
func (t Target) Check() error {
	u := t.URL
	switch {
	case u == nil:
		return errors.New("forward: URL is required")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("forward: URL %q must be http or https", u.Redacted())
	case u.Host == "" || u.Opaque != "":
		return fmt.Errorf("forward: URL %q must name a host", u.Redacted())
	case u.User != nil:
		return fmt.Errorf("forward: URL %q must hold no user or password: set the credentials in headers", u.Redacted())
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("forward: URL %q must hold no query or fragment", u.Redacted())
	case t.Margin <= 0:
		return errors.New("forward: Margin must be positive")
	case t.Timeout < 0 || t.MaxBody < 0 || t.MaxResponse < 0 || t.MaxConcurrent < 0 || t.MaxPerTenant < 0:
		return errors.New("forward: Timeout, MaxBody, MaxResponse, MaxConcurrent and MaxPerTenant must not be negative")
	}
	for name, vs := range t.Headers {
		if c := textproto.CanonicalMIMEHeaderKey(name); never(c) && c != "Authorization" && c != "Cookie" {
			return fmt.Errorf("forward: header %q may not be set", name)
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("forward: header %q holds a line break", name)
			}
		}
	}
	for _, name := range t.Forward {
		if never(name) {
			return fmt.Errorf("forward: header %q is never forwarded", name)
		}
	}
	return nil
}

// Forwarder sends calls to one upstream. Create it with New; Close it.
type Forwarder struct {
	t       Target
	base    *url.URL // t.URL, its path ending in "/"
	forward map[string]bool
	proxy   *httputil.ReverseProxy
	own     *http.Transport // the Transport New made, closed by Close

	mu       sync.Mutex
	inFlight int
	byTenant map[string]int // only tenants with calls in flight: at most MaxConcurrent
}

// New returns a Forwarder for t, its defaults filled in.
func New(t Target) (*Forwarder, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	t.Timeout = orDefault(t.Timeout, DefaultTimeout)
	t.MaxBody = orDefault(t.MaxBody, DefaultMaxBody)
	t.MaxResponse = orDefault(t.MaxResponse, DefaultMaxResponse)
	t.MaxConcurrent = orDefault(t.MaxConcurrent, DefaultMaxConcurrent)
	t.MaxPerTenant = min(orDefault(t.MaxPerTenant, DefaultMaxPerTenant), t.MaxConcurrent)
	f := &Forwarder{t: t, forward: map[string]bool{}, byTenant: map[string]int{}}
	base := *t.URL
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
		if base.RawPath != "" {
			base.RawPath += "/"
		}
	}
	f.base = &base
	for _, h := range slices.Concat(DefaultForward, t.Forward) {
		f.forward[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	transport := t.Transport
	if transport == nil {
		f.own = &http.Transport{
			Proxy:               nil, // the operator's address, as configured: no environment proxy
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:   true,
			MaxIdleConns:        t.MaxConcurrent,
			MaxIdleConnsPerHost: t.MaxConcurrent,
			MaxConnsPerHost:     t.MaxConcurrent,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
			// The caller's Accept-Encoding goes on as it is, and the
			// answer comes back as encoded.
			DisableCompression: true,
		}
		transport = f.own
	}
	logger := t.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f.proxy = &httputil.ReverseProxy{
		Rewrite:        f.rewrite,
		Transport:      &paced{next: transport, within: t.Margin / 2},
		FlushInterval:  -1, // stream the answer as it comes
		ModifyResponse: f.modifyResponse,
		ErrorHandler:   f.errorHandler,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return f, nil
}

func orDefault[T int | int64 | time.Duration](x, d T) T {
	if x == 0 {
		return d
	}
	return x
}

// MaxBody is the largest request body a call may carry, in bytes.
func (f *Forwarder) MaxBody() int64 { return f.t.MaxBody }

// Close closes the Forwarder's idle connections. Calls in flight go on.
func (f *Forwarder) Close() {
	if f.own != nil {
		f.own.CloseIdleConnections()
	}
}

// Errors of Enter: the upstream's calls in flight on this server, or the
// tenant's, are at their bound.
var (
	ErrServerBusy = &sluice.Error{Kind: sluice.KindExhausted, Message: "the upstream's calls in flight on this server are at their bound"}
	ErrTenantBusy = &sluice.Error{Kind: sluice.KindExhausted, Message: "the tenant's calls in flight to the upstream are at their bound"}
)

// Enter counts a call of tenant in flight, or refuses it with ErrServerBusy
// or ErrTenantBusy; leave, called once when the call is answered, uncounts
// it.
func (f *Forwarder) Enter(tenant string) (leave func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.inFlight >= f.t.MaxConcurrent:
		return nil, ErrServerBusy
	case f.byTenant[tenant] >= f.t.MaxPerTenant:
		return nil, ErrTenantBusy
	}
	f.inFlight++
	f.byTenant[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.inFlight--
			if f.byTenant[tenant]--; f.byTenant[tenant] <= 0 {
				delete(f.byTenant, tenant)
			}
		})
	}, nil
}

// InFlight returns the calls in flight, and the tenants that have some.
func (f *Forwarder) InFlight() (calls, tenants int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight, len(f.byTenant)
}

// ErrPath refuses a path that is not plainly under the target's base.
var ErrPath = sluice.Invalid("path", "must be a path under the upstream's base: segments of printable characters, none empty, '.' or '..', and no encoded '/' or '\\'")

// URL returns the address a call of escapedPath (as the caller escaped
// it, with no leading '/') and rawQuery goes to: the target's base with
// the path appended. Each segment, unescaped, must be printable and hold
// no '/' or '\', and none may be empty (but for a trailing '/'), "." or
// ".."; so nothing reaches above the base, nor another host or scheme,
// however the third party reads the path.
func (f *Forwarder) URL(escapedPath, rawQuery string) (*url.URL, error) {
	var segs []string
	trailing := ""
	if p, ok := strings.CutSuffix(escapedPath, "/"); ok && p != "" {
		escapedPath, trailing = p, "/"
	}
	if escapedPath != "" {
		for _, raw := range strings.Split(escapedPath, "/") {
			seg, err := url.PathUnescape(raw)
			if err != nil || seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/\\") || !printable(seg) {
				return nil, ErrPath
			}
			segs = append(segs, seg)
		}
	}
	if !printable(rawQuery) || strings.ContainsAny(rawQuery, " #") {
		return nil, sluice.Invalid("query", "must be printable, with no space or '#'")
	}
	u := *f.base
	escaped := make([]string, len(segs))
	for i, s := range segs {
		escaped[i] = url.PathEscape(s)
	}
	u.Path = f.base.Path + strings.Join(segs, "/") + trailing
	u.RawPath = f.base.EscapedPath() + strings.Join(escaped, "/") + trailing
	u.RawQuery = rawQuery
	return &u, nil
}

// printable reports whether s holds no control characters.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// ReadBody reads r's body, at most MaxBody bytes: a longer one is
// refused with wire's 413 error, naming the field "body".
func (f *Forwarder) ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// Wrapping wire's, it is answered 413.
	tooLarge := &sluice.Error{Kind: sluice.KindInvalid, Field: "body", Message: fmt.Sprintf("exceeds the upstream's %d bytes", f.t.MaxBody), Err: wire.ErrBodyTooLarge}
	if r.ContentLength > f.t.MaxBody {
		return nil, tooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.t.MaxBody))
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, tooLarge
	}
	if err != nil {
		return nil, &sluice.Error{Kind: sluice.KindInvalid, Field: "body", Message: "could not be read", Err: err}
	}
	return b, nil
}

// Call is a call to send: where, with what body, granted when.
type Call struct {
	URL     *url.URL
	Body    []byte
	Granted time.Time // on the wall clock, as time.Now gives it
	sent    time.Time // when the send started, once it has
}

type callKey struct{}

// Send sends r, as c says, to the third party, and passes its answer back
// to w: its status, its headers but for hop-by-hop ones and Set-Cookie
// (and with wire.HeaderSentAt, when the send started), and its body,
// streamed. A call that cannot start within half the
// margin of its grant is not sent (503, wire.ProxySlotMissed); one that
// fails answers 502, one that times out 504, naming the upstream. It
// returns when the answer is written or abandoned.
func (f *Forwarder) Send(w http.ResponseWriter, r *http.Request, c Call) {
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), callKey{}, &c), f.t.Timeout)
	defer cancel()
	f.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// rewrite makes the outbound request: the call's address and body, the
// caller's forwardable headers, the target's own.
func (f *Forwarder) rewrite(pr *httputil.ProxyRequest) {
	c := pr.In.Context().Value(callKey{}).(*Call)
	out := pr.Out
	out.URL = c.URL
	out.Host = ""
	out.Header = http.Header{}
	for name, vs := range pr.In.Header {
		if f.forward[name] && !never(name) {
			out.Header[name] = slices.Clone(vs)
		}
	}
	for name, vs := range f.t.Headers {
		out.Header[textproto.CanonicalMIMEHeaderKey(name)] = slices.Clone(vs)
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "")
	}
	out.ContentLength = int64(len(c.Body))
	out.Body = io.NopCloser(bytes.NewReader(c.Body))
	out.GetBody = nil
	if len(c.Body) == 0 {
		out.Body = http.NoBody
	}
	out.Trailer = nil
	out.TransferEncoding = nil
}

// modifyResponse refuses what Sluice does not pass on, bounds the body,
// drops the third party's cookies and any headers it names as Sluice's,
// and notes when the send started.
func (f *Forwarder) modifyResponse(res *http.Response) error {
	switch {
	case res.StatusCode == http.StatusSwitchingProtocols:
		return errProtocolSwitch
	case res.ContentLength > f.t.MaxResponse:
		return errTooLarge
	}
	res.Header.Del("Set-Cookie")
	res.Header.Del("Set-Cookie2")
	for name := range res.Header {
		if strings.HasPrefix(name, "Sluice-") { // Sluice's to say, not the upstream's
			delete(res.Header, name)
		}
	}
	if c, ok := res.Request.Context().Value(callKey{}).(*Call); ok && !c.sent.IsZero() {
		res.Header.Set(wire.HeaderSentAt, c.sent.UTC().Format(time.RFC3339Nano))
	}
	res.Body = &bounded{ReadCloser: res.Body, left: f.t.MaxResponse}
	return nil
}

var (
	errProtocolSwitch = errors.New("forward: the upstream switched protocols")
	errTooLarge       = errors.New("forward: the upstream's response is over its bound")
	errSlotMissed     = errors.New("forward: the send could not start within its time")
)

// errorHandler answers a call that failed, by its error: nothing of the
// upstream's address is shown.
func (f *Forwarder) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errSlotMissed):
		wire.WriteProxyFailure(w, f.t.Name, wire.ProxySlotMissed, "the call was granted, but the server could not send it in time; nothing was sent: try again")
	case errors.Is(r.Context().Err(), context.DeadlineExceeded) || isTimeout(err):
		wire.WriteProxyFailure(w, f.t.Name, wire.ProxyTimeout, fmt.Sprintf("the upstream did not answer within %v", f.t.Timeout))
	case errors.Is(err, errTooLarge):
		wire.WriteProxyFailure(w, f.t.Name, wire.ProxyFailed, fmt.Sprintf("the upstream's response is over %d bytes", f.t.MaxResponse))
	case errors.Is(err, errProtocolSwitch):
		wire.WriteProxyFailure(w, f.t.Name, wire.ProxyFailed, "the upstream switched protocols, which the proxy does not pass on")
	case r.Context().Err() != nil:
		// The caller went: no one reads an answer.
	default:
		wire.WriteProxyFailure(w, f.t.Name, wire.ProxyFailed, "the upstream could not be reached or failed")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// paced starts a send only within its time of the call's grant.
type paced struct {
	next   http.RoundTripper
	within time.Duration
}

func (p *paced) RoundTrip(r *http.Request) (*http.Response, error) {
	if c, ok := r.Context().Value(callKey{}).(*Call); ok {
		if c.sent = time.Now(); c.sent.Sub(c.Granted) > p.within {
			if r.Body != nil {
				r.Body.Close()
			}
			return nil, errSlotMissed
		}
	}
	return p.next.RoundTrip(r)
}

// bounded is a response body that fails past its bound, which makes the
// proxy abort the answer rather than pass on more.
type bounded struct {
	io.ReadCloser
	left int64
}

func (b *bounded) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// Timeout is the longest a call takes from its send to its answer's end.
func (f *Forwarder) Timeout() time.Duration { return f.t.Timeout }
