package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// benchConfig is the configuration of `sluice bench`.
type benchConfig struct {
	URL      string
	Workers  int
	Keys     int
	Duration time.Duration
	MaxReqs  int64
	APIKey   string
	Policy   string
	// GRPC, if set, is the address of Envoy's rate limit service to
	// drive instead of POST /v1/check; URL still serves /metrics.
	GRPC      string
	GRPCLimit uint
}

const defaultBenchPolicy = `{"name":"bench","algorithm":"fixed_window","limit":1000000,"window":"1m"}`

func parseBench(args []string, stdout, stderr io.Writer) (benchConfig, error) {
	var c benchConfig
	fs := flag.NewFlagSet("sluice bench", flag.ContinueOnError)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "the sluice server, on loopback")
	fs.IntVar(&c.Workers, "workers", 50, "concurrent workers, each on its own keep-alive connection")
	fs.IntVar(&c.Keys, "keys", 1000, "distinct keys, spread over the workers")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to send (at most 10m)")
	fs.Int64Var(&c.MaxReqs, "requests", 10_000_000, "stop after this many requests")
	fs.StringVar(&c.APIKey, "api-key", "", "API key, if the server requires one")
	fs.StringVar(&c.Policy, "policy", defaultBenchPolicy, "inline policy JSON of each check")
	fs.StringVar(&c.GRPC, "grpc", "", "drive Envoy's rate limit service (ShouldRateLimit) at this loopback `address` instead of POST /v1/check; --url still reads the server's /metrics")
	fs.UintVar(&c.GRPCLimit, "grpc-limit", 1_000_000, "with --grpc: each descriptor's limit per minute, sent as the request's override (0: none, the rule decides). The server must configure the domain \"bench\" (--envoy-config bench/envoy): a domain not configured is answered OK, uncounted")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return c, err
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || u.Host == "":
		return c, fmt.Errorf("bench: --url %q is not a URL", c.URL)
	case !loopback(hostPort(u)):
		return c, fmt.Errorf("bench: --url %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", c.URL)
	case c.GRPC != "" && !loopback(c.GRPC):
		return c, fmt.Errorf("bench: --grpc %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", c.GRPC)
	case c.GRPCLimit > math.MaxUint32:
		return c, fmt.Errorf("bench: --grpc-limit must be at most %d, got %d", uint32(math.MaxUint32), c.GRPCLimit)
	case c.Workers < 1 || c.Workers > 10_000:
		return c, fmt.Errorf("bench: --workers must be 1 to 10000, got %d", c.Workers)
	case c.Keys < 1:
		return c, fmt.Errorf("bench: --keys must be positive, got %d", c.Keys)
	case c.Duration <= 0 || c.Duration > 10*time.Minute:
		return c, fmt.Errorf("bench: --duration must be in (0, 10m], got %v", c.Duration)
	case c.MaxReqs < 1:
		return c, fmt.Errorf("bench: --requests must be positive, got %d", c.MaxReqs)
	}
	return c, nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// benchResult is what a run measured.
type benchResult struct {
	Requests, Allowed, Denied, Errors int64
	Elapsed                           time.Duration
	P50, P99                          time.Duration
	// CPUPerDecision is the server's CPU time per decision, from its
	// process_cpu_seconds_total before and after; zero if unavailable.
	CPUPerDecision time.Duration
	// FirstError is the first failed request's error, if any failed.
	FirstError string
	// ClientCPUPerDecision is this process's own CPU time per decision:
	// the load generator's, which the server's figure leaves out.
	ClientCPUPerDecision time.Duration
}

func (r benchResult) String() string {
	rate := float64(r.Requests) / r.Elapsed.Seconds()
	s := fmt.Sprintf("requests %d in %v: %.0f decisions/s (allowed %d, denied %d, errors %d)\nlatency p50 %v p99 %v\n",
		r.Requests, r.Elapsed.Round(time.Millisecond), rate, r.Allowed, r.Denied, r.Errors, r.P50, r.P99)
	if r.CPUPerDecision > 0 {
		s += fmt.Sprintf("server CPU %.1f µs per decision\n", float64(r.CPUPerDecision)/float64(time.Microsecond))
	} else {
		s += "server CPU: unavailable (no process_cpu_seconds_total at /metrics)\n"
	}
	if r.FirstError != "" {
		s += fmt.Sprintf("first error: %s\n", r.FirstError)
	}
	s += fmt.Sprintf("load generator CPU %.1f µs per decision\n", float64(r.ClientCPUPerDecision)/float64(time.Microsecond))
	return s
}

// bench drives POST /v1/check and prints what it measured.
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseBench(args, stdout, stderr)
	if err != nil {
		return err
	}
	res, err := runBench(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, res)
	return nil
}

func runBench(ctx context.Context, c benchConfig) (benchResult, error) {
	base := strings.TrimRight(c.URL, "/")
	tr := &http.Transport{MaxIdleConns: c.Workers, MaxIdleConnsPerHost: c.Workers, MaxConnsPerHost: c.Workers, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var workers []decideFunc
	if c.GRPC != "" {
		ws, closeAll, err := grpcWorkers(c)
		if err != nil {
			return benchResult{}, err
		}
		defer closeAll()
		workers = ws
	} else {
		for range c.Workers {
			workers = append(workers, httpWorker(c, hc, base))
		}
	}
	cpu0, cpuErr := serverCPU(ctx, hc, base)
	self0 := selfCPU()

	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	var sent atomic.Int64
	var allowed, denied, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	lat := make([][]time.Duration, c.Workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w, decide := range workers {
		wg.Go(func() {
			for i := w; ; i += c.Workers {
				if ctx.Err() != nil || sent.Add(1) > c.MaxReqs {
					return
				}
				t0 := time.Now()
				ok, err := decide(ctx, i%c.Keys)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					}
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
				if ok {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res := benchResult{Allowed: allowed.Load(), Denied: denied.Load(), Errors: errs.Load(), Elapsed: time.Since(start)}
	if e := firstErr.Load(); e != nil {
		res.FirstError = (*e).Error()
	}
	res.Requests = res.Allowed + res.Denied
	all := slices.Concat(lat...)
	slices.Sort(all)
	if n := len(all); n > 0 {
		res.P50, res.P99 = all[n/2], all[min(n-1, n*99/100)]
	}
	if res.Requests == 0 {
		return res, errors.New("bench: no request was answered")
	}
	res.ClientCPUPerDecision = (selfCPU() - self0) / time.Duration(res.Requests)
	if cpuErr == nil {
		if cpu1, err := serverCPU(context.Background(), hc, base); err == nil && cpu1 > cpu0 {
			res.CPUPerDecision = time.Duration(float64(cpu1-cpu0) / float64(res.Requests))
		}
	}
	return res, nil
}

// decideFunc asks for one decision on key number k: whether it was
// admitted, or an error (a failed request, or an answer that is neither).
type decideFunc func(ctx context.Context, k int) (bool, error)

// httpWorker decides with POST /v1/check, on the client's keep-alive
// connections.
func httpWorker(c benchConfig, hc *http.Client, base string) decideFunc {
	var body bytes.Buffer
	return func(ctx context.Context, k int) (bool, error) {
		body.Reset()
		fmt.Fprintf(&body, `{"tenant":"bench","checks":[{"key":"user-%d","policy":%s}]}`, k, c.Policy)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/check", bytes.NewReader(body.Bytes()))
		req.Header.Set("Content-Type", "application/json")
		if c.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.APIKey)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("status %d", resp.StatusCode)
	}
}

// selfCPU is the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU reads the server's process_cpu_seconds_total from /metrics: the
// CPU time the kernel accounts to the server process.
func serverCPU(ctx context.Context, hc *http.Client, base string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(f * float64(time.Second)), nil
		}
	}
	return 0, errors.New("no process_cpu_seconds_total")
}
