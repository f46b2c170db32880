package benchws

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The tenants of the slow-reader phase: the attacker, whose members never
// read, and the victim, whose pooled messages share the queue's workers.
const (
	slowTenant   = "bench-ws-slow"
	victimTenant = "bench-ws-victim"
)

// hostage measures whether one tenant's clients that never read hold
// another tenant's pooled messages. A victim tenant's one connection
// sends pooled messages at 100 a second for c.SlowFor, and their round
// trips are measured alone, then, after 2 seconds of it, while c.Slow
// sessions of another tenant each hold a member that never reads
// (dialled again as soon as the server drops it) and a sender of
// c.SlowFrame-byte frames (back to back, or c.SlowRate a second), which
// reads its echoes, from a process of its own (startAttack). All on the
// first node.
func (b *wsBench) hostage() error {
	c := b.c
	for _, t := range []struct {
		id            string
		conns, perSes int
	}{{victimTenant, 10, 10}, {slowTenant, 8*c.Slow + 20, 20}} {
		body := fmt.Sprintf(`{"id":%q,"settings":{"tenantConnections":%d,"connectionsPerSession":%d,"tenantPerMinute":1000000000,"sessionPerMinute":1000000000,"sessionTTL":3600,"messagesPerMinute":1000000000}}`, t.id, t.conns, t.perSes)
		if _, err := b.call("POST", "/v1/tenants", body); err != nil {
			return err
		}
	}
	s, err := b.sessionOf(victimTenant)
	if err != nil {
		return err
	}
	ws, err := b.dial(s, 0)
	if err != nil {
		return fmt.Errorf("bench-ws: slow: victim: %w", err)
	}
	defer ws.CloseNow()
	messages := int(c.SlowFor / (10 * time.Millisecond))
	v := &victim{ws: ws, rtts: make([]time.Duration, 2*messages)}
	vctx, vstop := context.WithCancel(b.ctx)
	var reader sync.WaitGroup
	reader.Go(func() { readFrames(vctx, ws, v.echo) })
	defer reader.Wait()
	defer vstop()
	alone, err := v.round(b.ctx, 0, messages)
	if err != nil {
		return err
	}
	// The attack's clients run in a process of their own, as another
	// tenant's clients run on machines of their own: in this one they
	// would share the victim's Go scheduler, and the victim's round trips
	// would measure the bench's own goroutines as much as the server.
	var attackers []string
	for range c.Slow {
		s, err := b.sessionOf(slowTenant)
		if err != nil {
			return err
		}
		attackers = append(attackers, s)
	}
	att, err := b.startAttack(attackers)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the attack under way: the socket buffers of the members that never read fill
	beside, err := v.round(b.ctx, messages, messages)
	tally, aerr := att.stop()
	if err != nil {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("bench-ws: slow: the attack: %w", aerr)
	}
	deaf := "members that never read"
	if !c.SlowDeaf {
		deaf = "no member that never reads"
	}
	rate := "back to back"
	if c.SlowRate > 0 {
		rate = fmt.Sprintf("%d/s each", c.SlowRate)
	}
	a50, a99 := percentiles(alone)
	v50, v99 := percentiles(beside)
	fmt.Fprintf(b.out, "slow readers: a victim tenant's pooled round trip, %d messages at 100/s each time: alone p50 %v p99 %v max %v; beside %d sessions of another tenant, %s, senders of %d-byte frames (%s, %s): p50 %v p99 %v max %v (p99 %.1fx alone); %d of %d echoes back; the attack: %d frames sent, %d members that never read dialled, %d of them dropped by the server\n",
		messages, a50, a99, alone[len(alone)-1], c.Slow, deaf, c.SlowFrame, c.SlowQueue, rate, v50, v99, beside[len(beside)-1], float64(v99)/float64(max(a99, 1)), len(beside), messages, tally.Sent, tally.Dialled, tally.Dropped)
	return nil
}

// attackEnv names the environment variable that makes bench-ws the
// attacking process of --slow: its value is the attacking sessions, in
// JSON; the process attacks until its stdin closes, then prints its tally.
const attackEnv = "SLUICE_BENCH_WS_ATTACK"

// attackTally is what the attacking process did.
type attackTally struct {
	Sent, Dialled, Dropped int64
	Err                    string `json:",omitempty"`
}

// attack is the attacking process, started by startAttack.
type attack struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
}

// startAttack runs this binary again with c.Self (bench-ws with the same
// flags), to attack from sessions (attackSession each).
func (b *wsBench) startAttack(sessions []string) (*attack, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench-ws: slow: %w", err)
	}
	spec, _ := json.Marshal(sessions)
	a := &attack{cmd: exec.Command(exe, b.c.Self...)}
	a.cmd.Env = append(os.Environ(), attackEnv+"="+string(spec))
	a.cmd.Stdout, a.cmd.Stderr = &a.out, os.Stderr
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench-ws: slow: the attacking process: %w", err)
	}
	return a, nil
}

// stop ends the attack and returns its tally.
func (a *attack) stop() (attackTally, error) {
	a.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-done
		return attackTally{}, errors.New("the attacking process did not end within 30s of being told to")
	}
	var t attackTally
	if jerr := json.Unmarshal(a.out.Bytes(), &t); jerr != nil {
		return t, fmt.Errorf("the attacking process: %v, %v: %q", err, jerr, a.out.String())
	}
	if t.Err != "" {
		return t, errors.New(t.Err)
	}
	return t, err
}

// attackFrom is the attacking process's work: an attackSession in each
// session of spec until stdin closes (or ctx ends), then its tally on
// stdout.
func (b *wsBench) attackFrom(spec string, stdin io.Reader) error {
	var sessions []string
	if err := json.Unmarshal([]byte(spec), &sessions); err != nil {
		return fmt.Errorf("bench-ws: %s: %w", attackEnv, err)
	}
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	go func() {
		io.Copy(io.Discard, stdin)
		stop()
	}()
	var t attackTally
	var sent, dialled, dropped atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	for _, s := range sessions {
		wg.Go(func() {
			if err := b.attackSession(ctx, s, &sent, &dialled, &dropped); err != nil {
				once.Do(func() { t.Err = err.Error() })
				stop()
			}
		})
	}
	wg.Wait()
	t.Sent, t.Dialled, t.Dropped = sent.Load(), dialled.Load(), dropped.Load()
	return json.NewEncoder(b.out).Encode(t)
}

// victim is the victim tenant's connection, and the round trips of its
// messages by sequence (zero: no echo yet).
type victim struct {
	ws   *websocket.Conn
	mu   sync.Mutex
	rtts []time.Duration
	got  int
	all  chan struct{} // closed when the round's last echo is in
	want int           // echoes that close all
}

// echo records an echo's round trip: its arrival less its send time.
func (v *victim) echo(m benchFrame) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if m.Type != "echo" || m.Data.Seq < 0 || m.Data.Seq >= int64(len(v.rtts)) || v.rtts[m.Data.Seq] != 0 {
		return
	}
	v.rtts[m.Data.Seq] = max(time.Duration(time.Now().UnixNano()-m.Data.At), 1)
	if v.got++; v.got == v.want {
		close(v.all)
	}
}

// round sends n pooled messages, from sequence first, at 100 a second, and
// returns the round trips of those echoed within 30 seconds of the last,
// sorted.
func (v *victim) round(ctx context.Context, first, n int) ([]time.Duration, error) {
	v.mu.Lock()
	v.all, v.want = make(chan struct{}), v.got+n
	all := v.all
	v.mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for seq := first; seq < first+n; seq++ {
		<-tick.C
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := v.ws.Write(wctx, websocket.MessageText, benchMessage(int64(seq)))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench-ws: slow: victim: write: %w", err)
		}
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []time.Duration
	for _, d := range v.rtts[first : first+n] {
		if d != 0 {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("bench-ws: slow: the victim got no echo")
	}
	slices.Sort(out)
	return out, nil
}

// attackSession holds, in session s of the attacking tenant, a member that
// never reads, dialled again as soon as the server has dropped it (the
// management API answers 410 for it), and a sender that sends frames back
// to back and reads its echoes, until ctx ends.
func (b *wsBench) attackSession(ctx context.Context, s string, sent, dialled, dropped *atomic.Int64) error {
	sender, err := b.dial(s, 0)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer sender.CloseNow() // first: it ends the goroutines
	// Its echoes, let go undecoded: the bench's CPU is the victim's too.
	wg.Go(func() {
		for {
			_, r, err := sender.Reader(ctx)
			if err != nil {
				return
			}
			io.Copy(io.Discard, r)
		}
	})
	wg.Go(func() {
		frame := fmt.Appendf(nil, `{"action":%q,"data":%q}`, b.c.SlowQueue, strings.Repeat("x", b.c.SlowFrame))
		var pace <-chan time.Time
		if b.c.SlowRate > 0 {
			t := time.NewTicker(time.Second / time.Duration(b.c.SlowRate))
			defer t.Stop()
			pace = t.C
		}
		for ctx.Err() == nil {
			if pace != nil {
				select {
				case <-pace:
				case <-ctx.Done():
					return
				}
			}
			if sender.Write(ctx, websocket.MessageText, frame) != nil {
				return
			}
			sent.Add(1)
		}
	})
	for b.c.SlowDeaf && ctx.Err() == nil {
		deaf, id, err := b.dialID(s, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		dialled.Add(1)
		for ctx.Err() == nil && !b.connGone(ctx, slowTenant, id) {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		if ctx.Err() == nil {
			dropped.Add(1)
		}
		deaf.CloseNow()
	}
	<-ctx.Done()
	return nil
}

// connGone reports whether the first node's management API answers 410
// for tenant's connection id.
func (b *wsBench) connGone(ctx context.Context, tenant, id string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.bases[0]+"/v1/tenants/"+tenant+"/connections/"+url.PathEscape(id), nil)
	if b.c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.c.APIKey)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusGone
}
