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
	if err := run(context.Background(), []string{"sim", "fairshare", "--nodes", "2"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "not built yet") {
		t.Errorf("--nodes 2: %v", err)
	}
}
