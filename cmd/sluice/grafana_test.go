package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Grafana dashboard in docs/ is valid JSON, and every metric its
// queries read is one Sluice declares (in a CounterOpts, HistogramOpts or
// NewDesc of the source), so that a renamed metric breaks this test, not
// an operator's dashboard.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	declared := map[string]bool{}
	decl := regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(sluice_[a-z_]+)"`)
	for _, dir := range []string{"../../metrics"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
				declared[m[1]] = true
			}
		}
	}
	if len(declared) < 10 {
		t.Fatalf("found only %d declared metrics: %v", len(declared), declared)
	}
	used := regexp.MustCompile(`sluice_[a-z_]+`)
	n := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range used.FindAllString(tg.Expr, -1) {
				n++
				name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !declared[name] {
					t.Errorf("panel %q reads %s, which Sluice does not declare", p.Title, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard reads no metric")
	}
}
