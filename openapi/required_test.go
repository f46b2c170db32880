package openapi_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestPenaltyRequiredIsTheServers: the document's Penalty requires
// exactly the fields the server does. A full penalty is admitted; with
// one field left out, the server refuses it naming that field if and
// only if the document requires it.
func TestPenaltyRequiredIsTheServers(t *testing.T) {
	doc := load(t)
	schema := doc.Components.Schemas["Penalty"].Value
	_, base := serve(t)
	full := map[string]any{"after": 3, "base": "1m", "max": "1h"}
	if got, want := slices.Sorted(maps.Keys(schema.Properties)), slices.Sorted(maps.Keys(full)); !slices.Equal(got, want) {
		t.Fatalf("Penalty's properties are %v, the test knows %v", got, want)
	}
	check := func(pen map[string]any) (int, string) {
		body, _ := json.Marshal(map[string]any{"tenant": "acme", "checks": []any{map[string]any{
			"key": "k", "policy": map[string]any{"name": "p", "algorithm": "fixed_window", "limit": 1, "window": "1m", "penalty": pen},
		}}})
		req, _ := http.NewRequest("POST", base+"/v1/check", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+adminKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		var e struct{ Field string }
		json.Unmarshal(got, &e)
		return resp.StatusCode, e.Field
	}
	if code, field := check(full); code != http.StatusOK {
		t.Fatalf("a full penalty: %d (%s), want 200", code, field)
	}
	for name := range full {
		pen := maps.Clone(full)
		delete(pen, name)
		code, field := check(pen)
		refused := code == http.StatusBadRequest && field == "checks[0].policy.penalty."+name
		if required := slices.Contains(schema.Required, name); refused != required {
			t.Errorf("penalty without %s: %d naming %q; the document requires it: %v", name, code, field, required)
		}
	}
}
