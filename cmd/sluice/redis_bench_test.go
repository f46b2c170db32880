package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// The side by side of docs/benchmarks.md ("Redis: Sluice beside
// envoyproxy/ratelimit"): TestRedisBesideReference runs Sluice's nodes
// and envoyproxy/ratelimit's (the binary $SLUICE_RATELIMIT_BINARY names)
// on one redis-server, and drives both with the same ShouldRateLimit load
// from this process, in rounds, the two sides alternating within each.
// It measures; it asserts only that every call was answered OK (limits
// are never reached). Skipped without the binary.

// benchRLConfig is the one domain of both sides: three descriptor keys, a
// limit far above what a run spends.
const benchRLConfig = `domain: rlbench
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`

// rlSide is one side's processes: their pids and gRPC addresses.
type rlSide struct {
	name  string
	pids  []int
	addrs []string
}

// rlCase is one load: descriptors per request, and whether every request
// names one hot value (else values drawn uniformly from 1000).
type rlCase struct {
	descriptors int
	hot         bool
}

func (c rlCase) String() string {
	keys := "uniform"
	if c.hot {
		keys = "hot"
	}
	return fmt.Sprintf("%ddesc/%s", c.descriptors, keys)
}

// rlFigures are a phase's measures.
type rlFigures struct {
	decisions                int64
	wall                     time.Duration
	serverCPU, redisCPU      time.Duration
	commands, clientCommands int64 // commandstats' calls (scripts' own included); total_commands_processed
	reads                    int64 // total_reads_processed: reads of client sockets
	scripts                  int64 // EVALSHA + EVAL calls
}

func (f rlFigures) row() string {
	n := float64(f.decisions)
	return fmt.Sprintf("decisions %d in %v (%.0f/s); server CPU %.1f µs/decision; Redis CPU %.1f µs/decision; commands %.3f/decision; scripts %.3f/decision; socket reads %.3f/decision",
		f.decisions, f.wall.Round(time.Millisecond), n/f.wall.Seconds(),
		float64(f.serverCPU.Microseconds())/n, float64(f.redisCPU.Microseconds())/n,
		float64(f.commands)/n, float64(f.scripts)/n, float64(f.reads)/n)
}

func TestRedisBesideReference(t *testing.T) {
	ref := os.Getenv("SLUICE_RATELIMIT_BINARY")
	if ref == "" {
		t.Skip("SLUICE_RATELIMIT_BINARY does not name envoyproxy/ratelimit's binary (docs/benchmarks.md)")
	}
	rounds := envInt(t, "SLUICE_BENCH_ROUNDS", 3)
	requests := envInt(t, "SLUICE_BENCH_REQUESTS", 20000)
	workers := envInt(t, "SLUICE_BENCH_WORKERS", 32)
	r := redistest.StartOwn(t)
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()

	dir := t.TempDir()
	for _, d := range []string{"envoy", "runtime/ratelimit/config"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "rlbench.yaml"), []byte(benchRLConfig), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	// A deadline far above a round trip: the figures are of decisions,
	// never of fail modes.
	if err := os.WriteFile(cfg, []byte("defaults:\n  timeout: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []rlCase{{1, false}, {1, true}, {3, false}, {3, true}}
	for _, nodes := range []int{1, 3} {
		sl := rlSide{name: "sluice"}
		for range nodes {
			grpcAddr := freeAddr(t)
			p := start(t, "--store", "redis", "--redis-url", "redis://"+r.Addr, "--config", cfg,
				"--grpc-addr", grpcAddr, "--envoy-config", filepath.Join(dir, "envoy"), "--log-level", "warn")
			sl.pids, sl.addrs = append(sl.pids, p.cmd.Process.Pid), append(sl.addrs, grpcAddr)
		}
		rf := rlSide{name: "ratelimit"}
		for range nodes {
			pid, addr := startReference(t, ref, r.Addr, filepath.Join(dir, "runtime"))
			rf.pids, rf.addrs = append(rf.pids, pid), append(rf.addrs, addr)
		}
		for round := range rounds {
			for ci, c := range cases {
				sides := []rlSide{sl, rf}
				if (round+ci)%2 == 1 {
					sides = []rlSide{rf, sl}
				}
				for _, s := range sides {
					seed := uint64(1000*nodes + 10*round + ci)
					prefix := fmt.Sprintf("n%dr%dc%d", nodes, round, ci)
					f := runRL(t, rc, s, c, prefix, seed, workers, requests)
					t.Logf("RESULT nodes=%d round=%d case=%s side=%s seed=%d: %s", nodes, round+1, c, s.name, seed, f.row())
				}
			}
		}
	}
}

// startReference runs envoyproxy/ratelimit on redisAddr with its
// configuration under runtime (RUNTIME_SUBDIRECTORY ratelimit), and returns
// its pid and gRPC address once that listens.
func startReference(t *testing.T, bin, redisAddr, runtime string) (int, string) {
	t.Helper()
	port := func() string { _, p, _ := net.SplitHostPort(freeAddr(t)); return p }
	grpcPort := port()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", "PORT="+port(), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(), "USE_STATSD=false", "LOG_LEVEL=warn",
		"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=single", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+runtime, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("ratelimit's output:\n%s", out)
		}
	})
	addr := "127.0.0.1:" + grpcPort
	waitFor(t, "ratelimit's gRPC port", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return cmd.Process.Pid, addr
}

// runRL sends requests ShouldRateLimit calls to s (worker w on node w mod
// nodes), the case's descriptors valued under prefix, and measures.
func runRL(t *testing.T, rc *redis.Client, s rlSide, c rlCase, prefix string, seed uint64, workers, requests int) rlFigures {
	t.Helper()
	conns := make([]*grpc.ClientConn, workers)
	for w := range conns {
		cc, err := grpc.NewClient(s.addrs[w%len(s.addrs)], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		conns[w] = cc
	}
	// Each worker's requests, drawn before the clock starts.
	reqs := make([][]*rlspb.RateLimitRequest, workers)
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range requests {
		req := &rlspb.RateLimitRequest{Domain: "rlbench"}
		for d := range c.descriptors {
			v := prefix + "-hot"
			if !c.hot {
				v = prefix + "-" + strconv.Itoa(rng.IntN(1000))
			}
			req.Descriptors = append(req.Descriptors, &ratelimitpb.RateLimitDescriptor{
				Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: string(rune('a' + d)), Value: v}}})
		}
		reqs[i%workers] = append(reqs[i%workers], req)
	}
	// One call per connection first: connections made, scripts loaded.
	for w, cc := range conns {
		warm := &rlspb.RateLimitRequest{Domain: "rlbench", Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "a", Value: prefix + "-warm" + strconv.Itoa(w)}}}}}
		if _, err := rlspb.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), warm); err != nil {
			t.Fatalf("%s: warming: %v", s.name, err)
		}
	}
	cpu0, info0 := procCPU(t, s.pids), redisInfo(t, rc)
	var ok, bad atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		client := rlspb.NewRateLimitServiceClient(conns[w])
		wg.Go(func() {
			for _, req := range reqs[w] {
				if ctx.Err() != nil {
					return
				}
				resp, err := client.ShouldRateLimit(ctx, req)
				switch {
				case err != nil:
					bad.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case resp.OverallCode != rlspb.RateLimitResponse_OK:
					bad.Add(1)
					firstErr.CompareAndSwap(nil, resp.OverallCode.String())
				default:
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(begin)
	cpu1, info1 := procCPU(t, s.pids), redisInfo(t, rc)
	if bad.Load() > 0 {
		t.Fatalf("%s %s: %d calls not answered OK (first: %v)", s.name, c, bad.Load(), firstErr.Load())
	}
	return rlFigures{
		decisions: ok.Load(),
		wall:      wall,
		serverCPU: cpu1 - cpu0,
		redisCPU:  time.Duration((info1["used_cpu_sys"] + info1["used_cpu_user"] - info0["used_cpu_sys"] - info0["used_cpu_user"]) * float64(time.Second)),
		commands:  int64(info1["calls"] - info0["calls"]),
		reads:     int64(info1["total_reads_processed"] - info0["total_reads_processed"]),
		scripts:   int64(info1["cmdstat_evalsha"] + info1["cmdstat_eval"] - info0["cmdstat_evalsha"] - info0["cmdstat_eval"]),
	}
}

// procCPU is the CPU time (user and system) the processes have used, from
// /proc/PID/stat, in clock ticks of 10 ms.
func procCPU(t *testing.T, pids []int) time.Duration {
	t.Helper()
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// Fields after the command's ")": state is the 3rd field, utime
		// the 14th and stime the 15th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// redisInfo reads INFO's cpu, stats and commandstats: used_cpu_sys,
// used_cpu_user, total_reads_processed, each
// command's calls as cmdstat_NAME, and their sum as calls.
func redisInfo(t *testing.T, rc *redis.Client) map[string]float64 {
	t.Helper()
	text, err := rc.Info(context.Background(), "cpu", "stats", "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if name, ok := strings.CutPrefix(k, "cmdstat_"); ok {
			// calls=N,usec=...
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, _ := strconv.ParseFloat(calls, 64)
			m["cmdstat_"+name] = n
			if name != "info" {
				m["calls"] += n
			}
			continue
		}
		if slices.Contains([]string{"used_cpu_sys", "used_cpu_user", "total_reads_processed"}, k) {
			m[k], _ = strconv.ParseFloat(v, 64)
		}
	}
	return m
}

// envInt reads a positive integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("$%s: %q is not a positive integer", name, v)
	}
	return n
}
