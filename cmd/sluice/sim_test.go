package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestSimFairshare(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"sim", "fairshare", "--duration", "10s"}, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	for _, s := range []string{"fcfs", "cap", "priority", "sluice", "jain"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"sim", "fairshare", "--duration", "10s", "--json"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Strategies []struct {
			Strategy string  `json:"strategy"`
			Jain     float64 `json:"jain"`
		} `json:"strategies"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Strategies) != 4 {
		t.Fatalf("--json: %v, %d strategies:\n%s", err, len(rep.Strategies), out.String())
	}
}

func TestSimFairshareNodes(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"sim", "fairshare", "--duration", "10s", "--nodes", "3", "--json"}, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var rep struct {
		Nodes      int   `json:"nodes"`
		Rate       int64 `json:"rate_per_s"`
		Strategies []struct {
			Strategy    string `json:"strategy"`
			WindowsOver int    `json:"windows_over"`
			MaxInWindow int64  `json:"max_in_window"`
			Served      int64  `json:"served"`
		} `json:"strategies"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Strategies) != 4 {
		t.Fatalf("--json: %v, %d strategies:\n%s", err, len(rep.Strategies), out.String())
	}
	if rep.Nodes != 3 {
		t.Errorf("nodes %d, want 3", rep.Nodes)
	}
	s := rep.Strategies[3]
	if s.Strategy != "sluice" || s.Served == 0 || s.WindowsOver != 0 || s.MaxInWindow > rep.Rate {
		t.Errorf("sluice on 3 nodes: %+v, want served, never over the rate of %d", s, rep.Rate)
	}
	for _, n := range []string{"0", "17"} {
		err := run(context.Background(), []string{"sim", "fairshare", "--nodes", n}, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "--nodes") {
			t.Errorf("--nodes %s: %v, want an error naming --nodes", n, err)
		}
	}
}

// The workload's shape comes from the flags, and a bad list is an error
// naming its flag.
func TestSimFairshareShape(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"sim", "fairshare", "--duration", "5s", "--weights", "4/2/1", "--keys", "1/20", "--costs", "1/5",
		"--max-waits", "2s/300ms", "--shift", "2s", "--bursty", "0"}
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	for _, s := range []string{"weights 4/2/1; keys 1/20; costs 1/5; max waits 2s/300ms; demand shifts 2s; bursting none", "tenant of 20 keys", "wait 300ms", "cost 5"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
	for _, bad := range [][]string{{"--weights", "4/x"}, {"--keys", "0"}, {"--costs", "50"}, {"--max-waits", "2s/soon"}} {
		err := run(context.Background(), append([]string{"sim", "fairshare"}, bad...), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.TrimPrefix(bad[0], "--")) {
			t.Errorf("%v: %v, want an error naming %s", bad, err, bad[0])
		}
	}
}

// `sim regions` on three dynoxide servers replicated 200ms behind: Sluice
// never passes the limit in a window and loses no increment; the naive
// design, one item ADDed to from every region, does both.
func TestSimRegions(t *testing.T) {
	type report struct {
		Over  int   `json:"windows_over"`
		Lost  int64 `json:"lost_increments"`
		Errs  int64 `json:"errors"`
		Admit int64 `json:"admitted"`
	}
	runSim := func(design, duration string) report {
		t.Helper()
		var out, errb bytes.Buffer
		args := []string{"sim", "regions", "--duration", duration, "--lag", "200ms", "--rebalance", "200ms", "--design", design, "--json"}
		if err := run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("%s: %v: %s", design, err, errb.String())
		}
		var rep report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%s: %v:\n%s", design, err, out.String())
		}
		return rep
	}
	s := runSim("sluice", "4s")
	if s.Over != 0 || s.Lost != 0 || s.Errs != 0 || s.Admit < 200 {
		t.Errorf("sluice: %+v, want no window over, nothing lost, no errors, and at least half the limit admitted", s)
	}
	// The naive design passes the limit only where the demand is enough
	// to: on a busy machine the simulation makes fewer decisions in 4s,
	// so it runs longer until it shows (the sluice design is held to no
	// window over whatever it runs).
	n := runSim("naive", "4s")
	for _, d := range []string{"8s", "16s"} {
		if n.Over > 0 && n.Lost > 0 {
			break
		}
		n = runSim("naive", d)
	}
	if n.Over == 0 || n.Lost == 0 {
		t.Errorf("naive: %+v, want windows over the limit and lost increments", n)
	}
	var errb bytes.Buffer
	if err := run(context.Background(), []string{"sim", "regions", "--skew", "50/50"}, &bytes.Buffer{}, &errb); err == nil || !strings.Contains(err.Error(), "skew") {
		t.Errorf("--skew 50/50 on 3 regions: %v, want an error naming the skew", err)
	}
}
