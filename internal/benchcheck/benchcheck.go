// Package benchcheck is the load generator of `sluice bench`: workers
// that each ask a local server for decisions on keys in turn, over POST
// /v1/check or, with Config.GRPC, over Envoy's rate limit service
// (ShouldRateLimit), for a time or a number of requests. It measures
// decisions a second, their latency, and the CPU time per decision of the
// server (from its /metrics) and of the load generator itself.
//
// Load is only ever sent to loopback addresses.
package benchcheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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

	"github.com/sluicehq/sluice/internal/loopback"
)

// Config is a run of the bench. Each field is the `sluice bench` flag
// named beside it, whose help says what it means and whose default is the
// field's useful value; Validate's errors name the flags.
type Config struct {
	URL      string        // --url
	Workers  int           // --workers
	Keys     int           // --keys
	Duration time.Duration // --duration
	MaxReqs  int64         // --requests
	APIKey   string        // --api-key
	Policy   string        // --policy: inline policy JSON
	// GRPC, if set, is the address of Envoy's rate limit service to
	// drive instead of POST /v1/check; URL still serves /metrics.
	GRPC      string // --grpc
	GRPCLimit uint   // --grpc-limit
}

// DefaultPolicy is --policy's default: a limit no run reaches.
const DefaultPolicy = `{"name":"bench","algorithm":"fixed_window","limit":1000000,"window":"1m"}`

// Validate reports the first bad field of c, naming its flag.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("bench: --url %q is not a URL", c.URL)
	case !loopback.Addr(hostPort(u)):
		return fmt.Errorf("bench: --url %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", c.URL)
	case c.GRPC != "" && !loopback.Addr(c.GRPC):
		return fmt.Errorf("bench: --grpc %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", c.GRPC)
	case c.GRPCLimit > math.MaxUint32:
		return fmt.Errorf("bench: --grpc-limit must be at most %d, got %d", uint32(math.MaxUint32), c.GRPCLimit)
	case c.Workers < 1 || c.Workers > 10_000:
		return fmt.Errorf("bench: --workers must be 1 to 10000, got %d", c.Workers)
	case c.Keys < 1:
		return fmt.Errorf("bench: --keys must be positive, got %d", c.Keys)
	case c.Duration <= 0 || c.Duration > 10*time.Minute:
		return fmt.Errorf("bench: --duration must be in (0, 10m], got %v", c.Duration)
	case c.MaxReqs < 1:
		return fmt.Errorf("bench: --requests must be positive, got %d", c.MaxReqs)
	}
	return nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// Result is what a run measured; String formats it for people.
type Result struct {
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

func (r Result) String() string {
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

// Run validates c, then drives the server for c.Duration or c.MaxReqs
// requests, whichever ends first, and returns what it measured; ctx ends
// the run early. It fails if no request was answered.
func Run(ctx context.Context, c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	base := strings.TrimRight(c.URL, "/")
	tr := &http.Transport{MaxIdleConns: c.Workers, MaxIdleConnsPerHost: c.Workers, MaxConnsPerHost: c.Workers, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var workers []decideFunc
	if c.GRPC != "" {
		ws, closeAll, err := grpcWorkers(c)
		if err != nil {
			return Result{}, err
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
	res := Result{Allowed: allowed.Load(), Denied: denied.Load(), Errors: errs.Load(), Elapsed: time.Since(start)}
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
func httpWorker(c Config, hc *http.Client, base string) decideFunc {
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
