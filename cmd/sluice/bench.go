package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return c, err
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || u.Host == "":
		return c, fmt.Errorf("bench: --url %q is not a URL", c.URL)
	case !loopback(hostPort(u)):
		return c, fmt.Errorf("bench: --url %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", c.URL)
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
	cpu0, cpuErr := serverCPU(ctx, hc, base)

	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	var sent atomic.Int64
	var allowed, denied, errs atomic.Int64
	lat := make([][]time.Duration, c.Workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c.Workers {
		wg.Go(func() {
			var body bytes.Buffer
			for i := w; ; i += c.Workers {
				if ctx.Err() != nil || sent.Add(1) > c.MaxReqs {
					return
				}
				body.Reset()
				fmt.Fprintf(&body, `{"tenant":"bench","checks":[{"key":"user-%d","policy":%s}]}`, i%c.Keys, c.Policy)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/check", bytes.NewReader(body.Bytes()))
				req.Header.Set("Content-Type", "application/json")
				if c.APIKey != "" {
					req.Header.Set("Authorization", "Bearer "+c.APIKey)
				}
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[w] = append(lat[w], time.Since(t0))
				switch resp.StatusCode {
				case http.StatusOK:
					allowed.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				default:
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res := benchResult{Allowed: allowed.Load(), Denied: denied.Load(), Errors: errs.Load(), Elapsed: time.Since(start)}
	res.Requests = res.Allowed + res.Denied
	all := slices.Concat(lat...)
	slices.Sort(all)
	if n := len(all); n > 0 {
		res.P50, res.P99 = all[n/2], all[min(n-1, n*99/100)]
	}
	if res.Requests == 0 {
		return res, errors.New("bench: no request was answered")
	}
	if cpuErr == nil {
		if cpu1, err := serverCPU(context.Background(), hc, base); err == nil && cpu1 > cpu0 {
			res.CPUPerDecision = time.Duration(float64(cpu1-cpu0) / float64(res.Requests))
		}
	}
	return res, nil
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
