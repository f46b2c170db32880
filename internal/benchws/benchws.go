// Package benchws is the load generator of `sluice bench-ws`: it measures a
// local server's WebSocket gateway, on one node or several sharing a
// store. Its phases, in order: memory per idle connection and connects per
// second; echo round trips, ordering and, on DynamoDB, store requests per
// message under a message rate; a fan-out's latency to the connections of
// one session, on the sender's node and on others; a burst to one session,
// which must drop no reader that reads; and, with Slow, whether another
// tenant's clients that never read hold a victim tenant's pooled messages.
//
// Load is only ever sent to loopback addresses.
package benchws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice/internal/loopback"
)

// Config is a run of the bench. Each field is the `sluice bench-ws` flag
// named beside it, whose help says what it means and whose default is the
// field's useful value; Validate's errors name the flags.
type Config struct {
	URL      string        // --url: one base URL, or several comma-separated
	Idle     int           // --idle
	Conns    int           // --conns
	Rate     int           // --rate
	Duration time.Duration // --duration
	Fanout   int           // --fanout
	Burst    int           // --burst
	APIKey   string        // --api-key
	// The Slow fields: the slow-reader phase (wsBench.hostage), an
	// attack beside a victim tenant's pooled messages.
	Slow      int           // --slow
	SlowFrame int           // --slow-frame
	SlowRate  int           // --slow-rate
	SlowQueue string        // --slow-queue
	SlowFor   time.Duration // --slow-duration
	SlowDeaf  bool          // --slow-deaf
	// Self runs this bench again, as the arguments of os.Executable: the
	// command and the same flags (`bench-ws` and its flags, for sluice).
	// With Slow, the attack runs in a process of its own, started so with
	// attackEnv set, and Run in that process attacks (see Run).
	Self []string
}

// BurstReaders is how many connections of the burst's session read it.
const BurstReaders = 10

// Validate reports the first bad field of c, naming its flag.
func (c Config) Validate() error {
	for _, one := range strings.Split(c.URL, ",") {
		u, err := url.Parse(one)
		switch {
		case err != nil || u.Host == "":
			return fmt.Errorf("bench-ws: --url %q is not a URL", one)
		case !loopback.Host(u.Hostname()):
			return fmt.Errorf("bench-ws: --url %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", one)
		}
	}
	switch {
	case c.Idle < 0 || c.Idle > 50_000 || c.Conns < 1 || c.Conns > 10_000:
		return errors.New("bench-ws: --idle must be 0 to 50000 and --conns 1 to 10000")
	case c.Rate < 1 || c.Rate > 100_000:
		return errors.New("bench-ws: --rate must be 1 to 100000")
	case c.Duration <= 0 || c.Duration > 10*time.Minute:
		return errors.New("bench-ws: --duration must be in (0, 10m]")
	case c.Fanout < 0 || c.Fanout > 1_000:
		return errors.New("bench-ws: --fanout must be 0 to 1000")
	case c.Burst < 0 || c.Burst > 100_000:
		return errors.New("bench-ws: --burst must be 0 to 100000")
	case c.Slow < 0 || c.Slow > 100 || c.SlowFrame < 1 || c.SlowFrame > 120<<10 || c.SlowRate < 0 || c.SlowRate > 10_000:
		return errors.New("bench-ws: --slow must be 0 to 100, --slow-frame 1 to 122880 and --slow-rate 0 to 10000")
	case c.SlowFor < 100*time.Millisecond || c.SlowFor > 5*time.Minute:
		return errors.New("bench-ws: --slow-duration must be in [100ms, 5m]")
	case c.SlowQueue != "pooled" && c.SlowQueue != "silo":
		return errors.New("bench-ws: --slow-queue must be pooled or silo")
	case c.Slow > 0 && len(c.Self) == 0:
		return errors.New("bench-ws: --slow needs Self, the command that runs the bench again for the attack")
	}
	return nil
}

// wsBench is one run of bench-ws: the nodes, and what the phases share.
type wsBench struct {
	ctx   context.Context
	c     Config
	out   io.Writer
	bases []string // the nodes' base URLs
	hc    *http.Client

	dials       atomic.Int64 // connects made, for the nodes' turns
	unavailable atomic.Int64 // connects answered 503 and made again
}

// The bench's one tenant holds every connection: a big tenant, counted on
// each node in one lease.
const benchTenant = "bench-ws"

// Run validates c, then runs the bench's phases against the nodes of
// c.URL, printing each phase's figures to w as it ends; it returns the
// first phase's error, or the first check a phase failed (a burst that
// dropped a reader that reads). ctx ends the run.
//
// In the attacking process of the Slow phase (attackEnv set), Run instead
// attacks from the sessions attackEnv names until its stdin closes, then
// prints the attack's tally to w in JSON.
func Run(ctx context.Context, c Config, w io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	b := &wsBench{ctx: ctx, c: c, out: w, hc: &http.Client{Timeout: 30 * time.Second}}
	for _, one := range strings.Split(c.URL, ",") {
		b.bases = append(b.bases, strings.TrimRight(one, "/"))
	}
	if spec := os.Getenv(attackEnv); spec != "" {
		return b.attackFrom(spec, os.Stdin)
	}
	perSession := max(10, c.Fanout+1, BurstReaders+1)
	body := fmt.Sprintf(`{"id":%q,"settings":{"tenantConnections":%d,"connectionsPerSession":%d,"tenantPerMinute":1000000000,"sessionPerMinute":1000000,"sessionTTL":3600,"messagesPerMinute":1000000000}}`,
		benchTenant, c.Idle+c.Conns+c.Fanout+BurstReaders+102, perSession)
	if _, err := b.call("POST", "/v1/tenants", body); err != nil {
		return err
	}
	idle, err := b.idle()
	defer func() {
		for _, ws := range idle {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return err
	}
	if err := b.echo(); err != nil {
		return err
	}
	if c.Fanout > 0 {
		if err := b.fanout(); err != nil {
			return err
		}
	}
	if c.Burst > 0 {
		if err := b.burst(); err != nil {
			return err
		}
	}
	if c.Slow > 0 {
		return b.hostage()
	}
	return nil
}

// call makes one call of the HTTP API on the first node; a 409 (the
// tenant is there from an earlier run) is not an error.
func (b *wsBench) call(method, path, body string) (map[string]any, error) {
	req, _ := http.NewRequestWithContext(b.ctx, method, b.bases[0]+path, strings.NewReader(body))
	if b.c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.c.APIKey)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusConflict {
		return out, fmt.Errorf("%s %s: %s %v", method, path, resp.Status, out)
	}
	return out, nil
}

// session makes a session of the tenant and returns the query that
// connects to it.
func (b *wsBench) session() (string, error) {
	return b.sessionOf(benchTenant)
}

// sessionOf makes a session of tenant and returns the query that connects
// to it.
func (b *wsBench) sessionOf(tenant string) (string, error) {
	out, err := b.call("PUT", "/v1/tenants/"+tenant+"/sessions", "")
	if err != nil {
		return "", err
	}
	id, _ := out["id"].(string)
	return tenant + "&session=" + url.QueryEscape(id), nil
}

// dial connects to session s on node (an index of b.bases; -1: the nodes
// in turn). A connect refused as unavailable (503: the store did not
// answer in time; nothing was counted) is made again after its
// Retry-After, as a client should, a few times; a 429 below the limit is
// a failure of the bench.
func (b *wsBench) dial(s string, node int) (*websocket.Conn, error) {
	ws, _, err := b.dialID(s, node)
	return ws, err
}

// dialID is dial, returning the connection's id too.
func (b *wsBench) dialID(s string, node int) (*websocket.Conn, string, error) {
	dctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if node < 0 {
		node = int(b.dials.Add(1)) % len(b.bases)
	}
	u := "ws" + strings.TrimPrefix(b.bases[node], "http") + "/v1/ws?tenant=" + s
	for try := 1; ; try++ {
		ws, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: &http.Client{}})
		if err == nil {
			ws.SetReadLimit(1 << 20)
		}
		if err == nil {
			return ws, resp.Header.Get("Sluice-Connection"), nil
		}
		if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || try == 10 {
			return nil, "", err
		}
		b.unavailable.Add(1)
		wait := time.Second
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			wait = time.Duration(n) * time.Second
		}
		select {
		case <-time.After(wait):
		case <-dctx.Done():
			return nil, "", err
		}
	}
}

// dialMany opens n connections, 64 at a time: connection i to the session
// sessionOf(i) on node nodeOf(i).
func (b *wsBench) dialMany(n int, sessionOf func(int) string, nodeOf func(int) int) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, n)
	var failed atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		if failed.Load() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ws, err := b.dial(sessionOf(i), nodeOf(i))
			if err != nil {
				failed.CompareAndSwap(nil, err)
				return
			}
			conns[i] = ws
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		opened := slices.DeleteFunc(conns, func(ws *websocket.Conn) bool { return ws == nil })
		return opened, fmt.Errorf("%d of %d connections: %w", len(opened), n, err)
	}
	return conns, nil
}

// metric sums a metric's series (every label set) over the nodes.
func (b *wsBench) metric(name string) (float64, bool) {
	sum, found := 0.0, false
	for _, base := range b.bases {
		req, _ := http.NewRequestWithContext(b.ctx, http.MethodGet, base+"/metrics", nil)
		resp, err := b.hc.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
				continue
			}
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
				sum, found = sum+v, true
			}
		}
	}
	return sum, found
}

// idle opens c.Idle connections, ten per session, over the nodes in turn:
// connects per second, and the nodes' memory per connection.
func (b *wsBench) idle() ([]*websocket.Conn, error) {
	mem0 := b.memory()
	start := time.Now()
	var sessions []string
	for i := 0; i < b.c.Idle; i += 10 {
		s, err := b.session()
		if err != nil {
			return nil, err
		}
		sessions = append(sessions, s)
	}
	sessStart := time.Now()
	idle, err := b.dialMany(b.c.Idle, func(i int) string { return sessions[i/10] }, func(int) int { return -1 })
	if err != nil {
		return idle, fmt.Errorf("bench-ws: idle: %w", err)
	}
	connectTime := time.Since(sessStart)
	time.Sleep(2 * time.Second) // let the server settle
	mem1 := b.memory()
	fmt.Fprintf(b.out, "idle: %d connections on %d node(s) in %v (sessions made in %v): %.0f connects/s admitted; %d connects answered 503 and made again\n",
		len(idle), len(b.bases), connectTime.Round(time.Millisecond), sessStart.Sub(start).Round(time.Millisecond), float64(len(idle))/connectTime.Seconds(), b.unavailable.Load())
	if n := float64(len(idle)); mem0.rss > 0 && mem1.rss > mem0.rss && n > 0 {
		fmt.Fprintf(b.out, "server memory: %.1f MiB more, %.1f KiB per connection\n", (mem1.rss-mem0.rss)/(1<<20), (mem1.rss-mem0.rss)/1024/n)
		fmt.Fprintf(b.out, "  per connection, of which: goroutine stacks %.1f KiB (%.2f goroutines), heap in use %.1f KiB (the collector's headroom over live data included)\n",
			(mem1.stack-mem0.stack)/1024/n, (mem1.goroutines-mem0.goroutines)/n, (mem1.heap-mem0.heap)/1024/n)
	}
	return idle, nil
}

// serverMemory is the nodes' memory, summed, from their metrics.
type serverMemory struct{ rss, stack, heap, goroutines float64 }

func (b *wsBench) memory() serverMemory {
	var m serverMemory
	m.rss, _ = b.metric("process_resident_memory_bytes")
	m.stack, _ = b.metric("go_memstats_stack_inuse_bytes")
	m.heap, _ = b.metric("go_memstats_heap_inuse_bytes")
	m.goroutines, _ = b.metric("go_goroutines")
	return m
}

// benchFrame is what the bench reads of a frame: its type, an error (a
// throttle), and the data the bench sent, with its sequence and send time.
type benchFrame struct {
	Type  string `json:"type"`
	Error string `json:"error"`
	Data  struct {
		Seq int64 `json:"seq"`
		At  int64 `json:"at"`
	} `json:"data"`
}

// readFrames reads ws's frames until it fails or ctx ends, giving each
// frame that decodes to each, and returns the read's error, or nil if ctx
// ended it.
func readFrames(ctx context.Context, ws *websocket.Conn, each func(benchFrame)) error {
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var m benchFrame
		if json.Unmarshal(data, &m) == nil {
			each(m)
		}
	}
}

// benchMessage is a message of sequence seq, stamped with the time now.
func benchMessage(seq int64) []byte {
	return fmt.Appendf(nil, `{"action":"pooled","data":{"seq":%d,"at":%d}}`, seq, time.Now().UnixNano())
}

// percentiles returns the median and the 99th percentile of ds, sorting it.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	if n := len(ds); n > 0 {
		p50, p99 = ds[n/2], ds[min(n-1, n*99/100)]
	}
	return p50, p99
}

// echo sends c.Rate messages a second over c.Conns connections, one
// session each, for c.Duration: the echo's round trip, its order, and
// the store requests per message if the nodes count them (DynamoDB).
func (b *wsBench) echo() error {
	c := b.c
	sessions := make([]string, c.Conns)
	for i := range sessions {
		s, err := b.session()
		if err != nil {
			return err
		}
		sessions[i] = s
	}
	conns, err := b.dialMany(c.Conns, func(i int) string { return sessions[i] }, func(int) int { return -1 })
	defer func() {
		for _, ws := range conns {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return fmt.Errorf("bench-ws: echo: %w", err)
	}
	next := make([]atomic.Int64, c.Conns) // the sequence expected back, per connection
	var mu sync.Mutex
	var rtts []time.Duration
	var received, violations, throttled atomic.Int64
	rctx, stop := context.WithCancel(b.ctx)
	defer stop()
	var readers sync.WaitGroup
	for i, ws := range conns {
		readers.Go(func() {
			readFrames(rctx, ws, func(m benchFrame) {
				switch {
				case m.Error != "":
					throttled.Add(1)
				case m.Type == "echo":
					if m.Data.Seq != next[i].Load() {
						violations.Add(1)
					}
					next[i].Store(m.Data.Seq + 1)
					received.Add(1)
					d := time.Duration(time.Now().UnixNano() - m.Data.At)
					mu.Lock()
					rtts = append(rtts, d)
					mu.Unlock()
				}
			})
		})
	}
	requests0, counted := b.metric("sluice_dynamodb_requests_total")
	// Eight senders, each with its share of the connections and of the
	// rate, catching up on what is due rather than waiting for ticks.
	const workers = 8
	start := time.Now()
	deadline := start.Add(c.Duration)
	var sentAll atomic.Int64
	var writeErr atomic.Value
	var senders sync.WaitGroup
	for w := range min(workers, c.Conns) {
		senders.Go(func() {
			var mine []int // the connections this sender writes to
			for i := w; i < c.Conns; i += workers {
				mine = append(mine, i)
			}
			rate := float64(c.Rate) * float64(len(mine)) / float64(c.Conns)
			seqs := make([]int64, len(mine))
			for sent := 0; ; {
				now := time.Now()
				if now.After(deadline) || writeErr.Load() != nil {
					return
				}
				if due := int(now.Sub(start).Seconds() * rate); sent >= due {
					time.Sleep(time.Millisecond)
					continue
				}
				k := sent % len(mine)
				wctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
				err := conns[mine[k]].Write(wctx, websocket.MessageText, benchMessage(seqs[k]))
				cancel()
				if err != nil {
					writeErr.CompareAndSwap(nil, err)
					return
				}
				seqs[k]++
				sent++
				sentAll.Add(1)
			}
		})
	}
	senders.Wait()
	if err, _ := writeErr.Load().(error); err != nil {
		return fmt.Errorf("bench-ws: echo: write: %w", err)
	}
	sent := int(sentAll.Load())
	elapsed := time.Since(start)
	// The last echoes.
	for wait := time.Now().Add(5 * time.Second); received.Load()+throttled.Load() < int64(sent) && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	requests1, _ := b.metric("sluice_dynamodb_requests_total")
	stop()
	readers.Wait()
	p50, p99 := percentiles(rtts)
	fmt.Fprintf(b.out, "echo: %d sent over %d connections in %v (%.0f/s, asked %d/s), %d echoed, %d throttled; round trip p50 %v p99 %v; ordering violations %d\n",
		sent, c.Conns, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds(), c.Rate, received.Load(), throttled.Load(), p50, p99, violations.Load())
	if counted && sent > 0 {
		fmt.Fprintf(b.out, "store: %.0f DynamoDB requests over the %d messages, %.3f per message, by %d node(s) (renewals of the idle connections included)\n",
			requests1-requests0, sent, (requests1-requests0)/float64(sent), len(b.bases))
	}
	return nil
}

// fanout connects c.Fanout members and a sender to one session, the
// members over the nodes in turn and the sender to the first, and sends
// 100 messages at 50 a second: the latency from the send to each
// member's copy, on the sender's node and on the others.
func (b *wsBench) fanout() error {
	const messages = 100
	n := b.c.Fanout
	s, err := b.session()
	if err != nil {
		return err
	}
	nodeOf := func(i int) int { return i % len(b.bases) }
	members, err := b.dialMany(n, func(int) string { return s }, nodeOf)
	defer func() {
		for _, ws := range members {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return fmt.Errorf("bench-ws: fan-out: %w", err)
	}
	sender, err := b.dial(s, 0)
	if err != nil {
		return fmt.Errorf("bench-ws: fan-out: sender: %w", err)
	}
	defer sender.CloseNow()
	var mu sync.Mutex
	lat := make([][]time.Duration, 2) // [0]: on the sender's node; [1]: on others
	got := make([]atomic.Int64, n)
	rctx, stop := context.WithCancel(b.ctx)
	defer stop()
	var readers sync.WaitGroup
	readers.Go(func() { readFrames(rctx, sender, func(benchFrame) {}) }) // the sender's echoes, let go
	for i, ws := range members {
		readers.Go(func() {
			readFrames(rctx, ws, func(m benchFrame) {
				if m.Type != "message" {
					return
				}
				d := time.Duration(time.Now().UnixNano() - m.Data.At)
				where := min(nodeOf(i), 1)
				mu.Lock()
				lat[where] = append(lat[where], d)
				mu.Unlock()
				got[i].Add(1)
			})
		})
	}
	tick := time.NewTicker(20 * time.Millisecond)
	for seq := range int64(messages) {
		<-tick.C
		wctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		err := sender.Write(wctx, websocket.MessageText, benchMessage(seq))
		cancel()
		if err != nil {
			tick.Stop()
			return fmt.Errorf("bench-ws: fan-out: write: %w", err)
		}
	}
	tick.Stop()
	all := func() bool {
		for i := range got {
			if got[i].Load() < messages {
				return false
			}
		}
		return true
	}
	for wait := time.Now().Add(30 * time.Second); !all() && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	readers.Wait()
	delivered := 0
	for i := range got {
		delivered += int(got[i].Load())
	}
	local, remote := lat[0], lat[1]
	lp50, lp99 := percentiles(local)
	fmt.Fprintf(b.out, "fan-out: %d messages to %d connections of one session: %d of %d delivered; on the sender's node (%d copies) p50 %v p99 %v",
		messages, n, delivered, messages*n, len(local), lp50, lp99)
	if len(b.bases) > 1 {
		rp50, rp99 := percentiles(remote)
		fmt.Fprintf(b.out, "; on other nodes (%d copies) p50 %v p99 %v", len(remote), rp50, rp99)
	}
	fmt.Fprintln(b.out)
	return nil
}

// burst connects BurstReaders readers and a sender to one session on the
// first node; the sender sends c.Burst frames back to back while every
// reader reads: no reader may be dropped, and each gets every frame.
func (b *wsBench) burst() error {
	n := b.c.Burst
	s, err := b.session()
	if err != nil {
		return err
	}
	conns, err := b.dialMany(BurstReaders+1, func(int) string { return s }, func(int) int { return 0 })
	defer func() {
		for _, ws := range conns {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return fmt.Errorf("bench-ws: burst: %w", err)
	}
	sender, readers := conns[BurstReaders], conns[:BurstReaders]
	got := make([]atomic.Int64, BurstReaders)
	var dropped, echoed, throttled atomic.Int64
	var closes sync.Map // close codes of dropped readers
	rctx, stop := context.WithCancel(b.ctx)
	defer stop()
	var wg sync.WaitGroup
	for i, ws := range readers {
		wg.Go(func() {
			err := readFrames(rctx, ws, func(m benchFrame) {
				if m.Type == "message" {
					got[i].Add(1)
				}
			})
			if err != nil {
				dropped.Add(1)
				closes.Store(websocket.CloseStatus(err), true)
			}
		})
	}
	var senderErr atomic.Value
	wg.Go(func() {
		err := readFrames(rctx, sender, func(m benchFrame) {
			switch {
			case m.Error != "":
				throttled.Add(1)
			case m.Type == "echo":
				echoed.Add(1)
			}
		})
		if err != nil {
			senderErr.Store(err)
		}
	})
	start := time.Now()
	for seq := range int64(n) {
		wctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		err := sender.Write(wctx, websocket.MessageText, benchMessage(seq))
		cancel()
		if err != nil {
			stop()
			wg.Wait()
			return fmt.Errorf("bench-ws: burst: write %d: %w", seq, err)
		}
	}
	sentIn := time.Since(start)
	done := func() bool {
		for i := range got {
			if got[i].Load() < int64(n) && dropped.Load() == 0 {
				return false
			}
		}
		return echoed.Load()+throttled.Load() >= int64(n) || senderErr.Load() != nil
	}
	for wait := time.Now().Add(60 * time.Second); !done() && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	least := int64(n)
	for i := range got {
		least = min(least, got[i].Load())
	}
	var codes []string
	closes.Range(func(k, _ any) bool { codes = append(codes, fmt.Sprint(k)); return true })
	fmt.Fprintf(b.out, "burst: %d frames back to back (sent in %v) to a session of %d readers: %d readers dropped %v; the least any reader got %d of %d, all in %v; sender: %d echoed, %d throttled, still connected %v\n",
		n, sentIn.Round(time.Millisecond), BurstReaders, dropped.Load(), codes, least, n, took.Round(time.Millisecond), echoed.Load(), throttled.Load(), senderErr.Load() == nil)
	if dropped.Load() > 0 || senderErr.Load() != nil {
		return fmt.Errorf("bench-ws: burst: %d readers dropped; sender: %v", dropped.Load(), senderErr.Load())
	}
	return nil
}
