package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// benchWSConfig is the configuration of `sluice bench-ws`.
type benchWSConfig struct {
	URL      string
	Idle     int
	Conns    int
	Rate     int
	Duration time.Duration
	APIKey   string
}

func parseBenchWS(args []string, stdout, stderr io.Writer) (benchWSConfig, error) {
	var c benchWSConfig
	fs := flag.NewFlagSet("sluice bench-ws", flag.ContinueOnError)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "the sluice server, on loopback; several, comma-separated, for nodes sharing a store: idle connections go to each in turn")
	fs.IntVar(&c.Idle, "idle", 10_000, "idle connections to open, to measure memory per connection and connects per second")
	fs.IntVar(&c.Conns, "conns", 1_000, "connections sending messages, one session each")
	fs.IntVar(&c.Rate, "rate", 1_000, "messages per second across the sending connections")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to send (at most 10m)")
	fs.StringVar(&c.APIKey, "api-key", "", "admin key, if the server requires one")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return c, err
	}
	for _, one := range strings.Split(c.URL, ",") {
		u, err := url.Parse(one)
		switch {
		case err != nil || u.Host == "":
			return c, fmt.Errorf("bench-ws: --url %q is not a URL", one)
		case !loopback(hostPort(u)):
			return c, fmt.Errorf("bench-ws: --url %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", one)
		}
	}
	switch {
	case c.Idle < 0 || c.Idle > 50_000 || c.Conns < 1 || c.Conns > 10_000:
		return c, errors.New("bench-ws: --idle must be 0 to 50000 and --conns 1 to 10000")
	case c.Rate < 1 || c.Rate > 100_000:
		return c, errors.New("bench-ws: --rate must be 1 to 100000")
	case c.Duration <= 0 || c.Duration > 10*time.Minute:
		return c, errors.New("bench-ws: --duration must be in (0, 10m]")
	}
	return c, nil
}

// benchWS measures the gateway: memory per idle connection and connects
// per second, then echo round trips and ordering under a message rate.
// It creates tenants "bench-ws-N" with room for the load.
func benchWS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseBenchWS(args, stdout, stderr)
	if err != nil {
		return err
	}
	var bases []string
	for _, one := range strings.Split(c.URL, ",") {
		bases = append(bases, strings.TrimRight(one, "/"))
	}
	base := bases[0]
	hc := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, body string) (map[string]any, error) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if c.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.APIKey)
		}
		resp, err := hc.Do(req)
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
	// One tenant holds every connection: a big tenant, counted on each
	// node in one lease.
	const tenant = "bench-ws"
	body := fmt.Sprintf(`{"id":%q,"settings":{"tenantConnections":%d,"connectionsPerSession":10,"tenantPerMinute":1000000000,"sessionPerMinute":1000,"sessionTTL":3600,"messagesPerMinute":1000000000}}`, tenant, c.Idle+c.Conns+100)
	if _, err := call("POST", "/v1/tenants", body); err != nil {
		return err
	}
	// session returns a new session of the tenant.
	session := func(conns int64) (string, error) {
		out, err := call("PUT", "/v1/tenants/"+tenant+"/sessions", "")
		if err != nil {
			return "", err
		}
		return tenant + "&session=" + out["id"].(string), nil
	}
	var dials atomic.Int64
	// dial connects to the nodes in turn.
	dial := func(s string) (*websocket.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		node := bases[int(dials.Add(1))%len(bases)]
		ws, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(node, "http")+"/v1/ws?tenant="+s, &websocket.DialOptions{HTTPClient: &http.Client{}})
		return ws, err
	}
	// rss is the nodes' resident memory, summed.
	rss := func() float64 {
		sum := 0.0
		for _, b := range bases {
			v, _ := serverGauge(ctx, hc, b, "process_resident_memory_bytes")
			sum += v
		}
		return sum
	}

	// Phase 1: idle connections, 100 sessions of up to 10 each... one
	// session per 10 connections.
	rss0 := rss()
	var idle []*websocket.Conn
	defer func() {
		for _, ws := range idle {
			ws.CloseNow()
		}
	}()
	start := time.Now()
	var sessions []string
	for i := 0; i < c.Idle; i += 10 {
		s, err := session(10)
		if err != nil {
			return err
		}
		sessions = append(sessions, s)
	}
	sessStart := time.Now()
	var mu sync.Mutex
	var dialErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range c.Idle {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ws, err := dial(sessions[i/10])
			if err != nil {
				dialErr.Store(err)
				return
			}
			mu.Lock()
			idle = append(idle, ws)
			mu.Unlock()
		})
	}
	wg.Wait()
	connectTime := time.Since(sessStart)
	if err, _ := dialErr.Load().(error); err != nil && len(idle) < c.Idle {
		return fmt.Errorf("bench-ws: %d of %d idle connections: %w", len(idle), c.Idle, err)
	}
	time.Sleep(2 * time.Second) // let the server settle
	rss1 := rss()
	fmt.Fprintf(stdout, "idle: %d connections in %v (sessions made in %v): %.0f connects/s admitted\n",
		len(idle), connectTime.Round(time.Millisecond), sessStart.Sub(start).Round(time.Millisecond), float64(len(idle))/connectTime.Seconds())
	if rss0 > 0 && rss1 > rss0 && len(idle) > 0 {
		fmt.Fprintf(stdout, "server memory: %.1f MiB more, %.1f KiB per connection\n", (rss1-rss0)/(1<<20), (rss1-rss0)/1024/float64(len(idle)))
	}

	// Phase 2: c.Conns connections, one session each, sending at c.Rate.
	type sender struct {
		ws   *websocket.Conn
		next atomic.Int64 // next seq expected back
	}
	senders := make([]*sender, c.Conns)
	for i := range senders {
		s, err := session(1)
		if err != nil {
			return err
		}
		ws, err := dial(s)
		if err != nil {
			return err
		}
		senders[i] = &sender{ws: ws}
		defer ws.CloseNow()
	}
	var rtts []time.Duration
	var received, violations, throttled atomic.Int64
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var readers sync.WaitGroup
	for _, sn := range senders {
		readers.Go(func() {
			for {
				_, b, err := sn.ws.Read(rctx)
				if err != nil {
					return
				}
				var m struct {
					Type  string `json:"type"`
					Error string `json:"error"`
					Data  struct {
						Seq int64 `json:"seq"`
						At  int64 `json:"at"`
					} `json:"data"`
				}
				if json.Unmarshal(b, &m) != nil {
					continue
				}
				if m.Error != "" {
					throttled.Add(1)
					continue
				}
				if m.Type != "echo" {
					continue
				}
				if m.Data.Seq != sn.next.Load() {
					violations.Add(1)
				}
				sn.next.Store(m.Data.Seq + 1)
				received.Add(1)
				d := time.Duration(time.Now().UnixNano() - m.Data.At)
				mu.Lock()
				rtts = append(rtts, d)
				mu.Unlock()
			}
		})
	}
	interval := time.Second / time.Duration(c.Rate)
	tick := time.NewTicker(interval)
	deadline := time.Now().Add(c.Duration)
	seqs := make([]int64, c.Conns)
	sent := 0
	for time.Now().Before(deadline) {
		<-tick.C
		i := sent % c.Conns
		frame := fmt.Sprintf(`{"action":"pooled","data":{"seq":%d,"at":%d}}`, seqs[i], time.Now().UnixNano())
		seqs[i]++
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := senders[i].ws.Write(wctx, websocket.MessageText, []byte(frame))
		cancel()
		if err != nil {
			return fmt.Errorf("bench-ws: write: %w", err)
		}
		sent++
	}
	tick.Stop()
	time.Sleep(2 * time.Second) // the last echoes
	stop()
	readers.Wait()
	slices.Sort(rtts)
	var p50, p99 time.Duration
	if n := len(rtts); n > 0 {
		p50, p99 = rtts[n/2], rtts[min(n-1, n*99/100)]
	}
	fmt.Fprintf(stdout, "echo: %d sent at %d/s over %d connections, %d echoed, %d throttled; round trip p50 %v p99 %v; ordering violations %d\n",
		sent, c.Rate, c.Conns, received.Load(), throttled.Load(), p50, p99, violations.Load())
	return nil
}

// serverGauge reads one gauge of the server's /metrics.
func serverGauge(ctx context.Context, hc *http.Client, base, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			return f, err
		}
	}
	return 0, fmt.Errorf("no %s", name)
}
