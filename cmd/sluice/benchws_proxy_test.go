package main

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/countproxy"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// proxyProcess is a running `sluice dynamodb count-proxy`.
type proxyProcess struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed when it has exited, its state in cmd.ProcessState
}

// startCountProxy runs `sluice dynamodb count-proxy` on a free loopback
// port in front of endpoint.
func startCountProxy(t *testing.T, endpoint string) *proxyProcess {
	t.Helper()
	cmd := exec.Command(binary, "dynamodb", "count-proxy", "--listen", "127.0.0.1:0", "--dynamodb-endpoint", endpoint)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// Its first line names the address; a proxy that never says is killed.
	kill := time.AfterFunc(patience, func() { cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	kill.Stop()
	addr, ok := strings.CutPrefix(strings.Fields(line + " x x x")[2], "http://")
	if err != nil || !ok {
		t.Fatalf("count-proxy said %q (%v); stderr:\n%s", line, err, stderr.String())
	}
	go func() { // the process's exit, for the cleanup
		cmd.Wait()
		close(exited)
	}()
	return &proxyProcess{cmd: cmd, addr: addr, exited: exited}
}

// TestBenchWSStoreMetrics runs the real binaries as docs/benchmarks.md
// does, in small: a count-proxy in front of dynoxide, a node behind it,
// and a short `sluice bench-ws --store-metrics`, whose store lines must
// be there with figures that parse, positive where a phase must ask the
// store something (a connect registers its connection). Then the proxy
// stops on an interrupt, cleanly.
func TestBenchWSStoreMetrics(t *testing.T) {
	proxy := startCountProxy(t, dynamotest.Get(t).Endpoint)
	addr := proxy.addr
	node := nodesVia(t, 1, "http://"+addr, "--ws-renew", "1s")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "bench-ws", "--url", "http://"+node.addr,
		"--idle", "20", "--conns", "2", "--rate", "20", "--duration", "1s", "--fanout", "4", "--burst", "0",
		"--store-metrics", "http://"+addr+"/metrics", "--idle-window", "2s").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("bench-ws:\n%s", out)
	num := `([0-9]+(?:\.[0-9]+)?)`
	for _, tc := range []struct {
		re       string
		positive []int // the groups that must be above zero
		equal    map[int]float64
	}{
		{`store: ` + num + ` requests for ` + num + ` connects, ` + num + ` per connect \(by operation: [^)]*PutItem`, []int{1, 3}, map[int]float64{2: 20}},
		{`store: idle over 2s: ` + num + ` connections in ` + num + ` sessions \(10 connections per session, [^)]*\) on 1 node\(s\): ` + num + ` writes/s, ` + num + ` reads/s; per node ` + num + ` writes/s, ` + num + ` reads/s; ` + num + ` writes/s per node per 1,000 idle sessions \(by operation: [^)]*\)`,
			nil, map[int]float64{1: 20, 2: 2}},
		{`store: ` + num + ` requests for ` + num + ` echoed messages \([^)]*\), ` + num + ` per message, across 1 node\(s\) \(by operation: [^)]*\)`, []int{2}, nil},
		{`store: ` + num + ` requests for 100 fanned-out messages, ` + num + ` per message, across 1 node\(s\) \(by operation: [^)]*\)`, nil, nil},
	} {
		m := regexp.MustCompile(tc.re).FindStringSubmatch(string(out))
		if m == nil {
			t.Errorf("no line matches %s", tc.re)
			continue
		}
		for i := 1; i < len(m); i++ {
			v, err := strconv.ParseFloat(m[i], 64)
			switch {
			case err != nil:
				t.Errorf("%q: group %d: %v", m[0], i, err)
			case tc.equal[i] != 0 && v != tc.equal[i]:
				t.Errorf("%q: group %d is %v, want %v", m[0], i, v, tc.equal[i])
			case v <= 0 && slices.Contains(tc.positive, i):
				t.Errorf("%q: group %d is %v, want it above zero", m[0], i, v)
			}
		}
	}
	if strings.Contains(string(out), "DynamoDB requests over the") {
		t.Errorf("with --store-metrics, the nodes' own store line too:\n%s", out)
	}
	// What the bench read is what the proxy serves: every node request.
	c, err := countproxy.Scrape(ctx, http.DefaultClient, "http://"+addr+"/metrics")
	if err != nil || c.Class(countproxy.Write) == 0 {
		t.Fatalf("the proxy's counts %v, %v", c, err)
	}
	if err := proxy.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proxy.exited:
	case <-time.After(patience):
		t.Fatal("the proxy did not exit on an interrupt")
	}
	if !proxy.cmd.ProcessState.Success() {
		t.Fatalf("the proxy exited %v on an interrupt", proxy.cmd.ProcessState)
	}
}

// TestCountProxyAndBenchLoopback: the proxy listens off loopback only when
// told to, and bench-ws reads store metrics only from loopback; their
// help names the new flags.
func TestCountProxyAndBenchLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "dynamodb", "count-proxy", "--listen", "0.0.0.0:0", "--dynamodb-endpoint", "http://127.0.0.1:1").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "not on loopback") || !strings.Contains(string(out), "--allow-remote") {
		t.Fatalf("count-proxy off loopback: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, binary, "dynamodb", "count-proxy", "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--dynamodb-endpoint is required") {
		t.Fatalf("count-proxy without an endpoint: %v\n%s", err, out)
	}
	for _, h := range [][]string{{"dynamodb", "count-proxy", "-h", "-allow-remote"}, {"bench-ws", "-h", "-store-metrics"}, {"bench-ws", "-h", "-idle-window"}} {
		out, err := exec.CommandContext(ctx, binary, h[:len(h)-1]...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), h[len(h)-1]) {
			t.Errorf("%v: %v, want %s in\n%s", h[:len(h)-1], err, h[len(h)-1], out)
		}
	}
	out, err = exec.CommandContext(ctx, binary, "bench-ws", "--url", "http://127.0.0.1:1", "--store-metrics", "http://192.0.2.1:18399/metrics").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--store-metrics") || !strings.Contains(string(out), "not on loopback") {
		t.Fatalf("bench-ws with store metrics off loopback: %v\n%s", err, out)
	}
}
