package fairsim

import (
	"strings"
	"testing"
	"time"
)

// TestWriteTable: the table names the workload, the nodes and a row per
// strategy.
func TestWriteTable(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		rep, err := Run(Config{Duration: 10 * time.Second, Nodes: nodes})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := rep.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		want := []string{"seed 0: 200 customers", "upstream quota 100/s", nodesLine(nodes), "jain/run"}
		for _, s := range rep.Strategies {
			want = append(want, " "+s.Strategy+"  ") // right-aligned
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%d nodes: the table lacks %q:\n%s", nodes, w, b.String())
			}
		}
	}
}
