package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/pseudo"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// rawKey is a person's id, as a client sends it: none of it may reach the
// store, the dashboard, the audit trail or the logs under
// --pseudonymise-keys.
const (
	rawKey    = "alice@example.com"
	rawMark   = "alice"
	keySecret = "a-test-secret-of-32-bytes-length"
)

const privacyConfig = `defaults:
  timeout: 30s
policies:
  api:
    algorithm: sliding_window
    limit: 5
    window: 2m
    key: [user]
    penalty: {after: 1, base: 1m, max: 1h}
  running:
    algorithm: concurrency
    limit: 3
    leaseTTL: 2m
    key: [user]
tenants:
  acme: {}
`

const (
	namedCheck  = `{"tenant":"acme","policies":["api"],"key":{"user":"` + rawKey + `"}}`
	inlineCheck = `{"tenant":"acme","hits":%d,"checks":[{"key":"` + rawKey + `","policy":{"name":"mine","algorithm":"sliding_window","limit":3,"window":"2m"}}]}`
	leaseBody   = `{"tenant":"acme","policy":"running","units":%d,"key":{"user":"` + rawKey + `"}}`
)

// TestPseudonymisedKeys: with --pseudonymise-keys, a person's key sent to
// checks, inline checks, leases and a block is found nowhere as sent: not
// in the store's items (Pebble's data dir, DynamoDB's table), the
// dashboard's answers, the blocks, the audit trail or the debug logs; its
// pseudonym is, and the erase route leaves no state of it: no item of the
// store holds its pseudonym, and its next checks start from full limits.
func TestPseudonymisedKeys(t *testing.T) {
	t.Setenv("SLUICE_KEY_SECRET", keySecret)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(privacyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := pseudo.New([]byte(keySecret))
	if err != nil {
		t.Fatal(err)
	}
	nym := k.Value("acme", "user", rawKey)
	for _, store := range []string{"memory", "pebble", "dynamodb"} {
		t.Run(store, func(t *testing.T) {
			args := []string{"--pseudonymise-keys", "--log-level", "debug", "--config", cfg, "--store", store}
			var items func() []string // every item of the store, as text; nil for memory
			var p *process
			switch store {
			case "pebble":
				dir := t.TempDir()
				args = append(args, "--data-dir", dir)
				items = func() []string {
					// Pebble's data dir is the process's: stopped for the
					// scan, started again after.
					stopGently(t, p)
					defer func() { p = start(t, args...) }()
					return pebbleItems(t, dir)
				}
			case "dynamodb":
				table := dynamotest.TableName(t)
				endpoint := dynamotest.Get(t).Endpoint
				if err := dynamostore.CreateTable(dynamotest.Context(t), dynamotest.NewClient(endpoint), table); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--dynamodb-endpoint", endpoint, "--dynamodb-table", table)
				items = func() []string { return dynamoItems(t, endpoint, table) }
			}
			p = start(t, args...)
			sendPersonalTraffic(t, p)

			answers := dashboardAnswers(t, p)
			for what, body := range answers {
				if strings.Contains(body, rawMark) {
					t.Errorf("%s holds the raw key: %s", what, body)
				}
			}
			if !strings.Contains(answers["top"], nym) || !strings.Contains(answers["blocks"], nym) {
				t.Errorf("the top list and the blocks do not show the pseudonym %s:\n%s\n%s", nym, answers["top"], answers["blocks"])
			}
			if items != nil {
				held := items()
				if !anyContains(held, nym) {
					t.Errorf("no item of the store holds the pseudonym %s: the scan sees nothing", nym)
				}
				for _, it := range held {
					if strings.Contains(it, rawMark) {
						t.Errorf("a store item holds the raw key: %q", it)
					}
				}
			}

			// Erase: the configured policies' state by the key's parts,
			// the inline policy's by the key. Both are sliding windows,
			// whose counters outlive a window's turn: the erase finds them
			// even if a window ends meanwhile.
			for _, body := range []string{`{"parts":{"user":"` + rawKey + `"}}`, `{"keyValue":"` + rawKey + `","inline":[{"name":"mine","algorithm":"sliding_window"}]}`} {
				code, out := p.call(t, "", "POST", "/v1/tenants/acme/erase", body)
				if code != 200 || out["counters"].(float64) < 1 {
					t.Fatalf("erase %s: %d %v", body, code, out)
				}
			}
			if items != nil {
				for _, it := range items() {
					// The audit trail keeps the pseudonym: the record
					// of the block and of the erase.
					if strings.Contains(it, rawMark) || strings.Contains(it, nym) && !isAudit(it) {
						t.Errorf("a store item of the key is left after the erase: %q", it)
					}
				}
			}
			answers = dashboardAnswers(t, p)
			for _, what := range []string{"top", "tenant top", "blocks", "try"} {
				if strings.Contains(answers[what], nym) {
					t.Errorf("%s still shows the erased key: %s", what, answers[what])
				}
			}
			if !strings.Contains(answers["audit"], `"action":"erase"`) || !strings.Contains(answers["audit"], nym) {
				t.Errorf("the audit trail has no erase of %s: %s", nym, answers["audit"])
			}
			// Full limits: the counter, the penalty box, the inline
			// counter and the lease are gone.
			if resp := p.check(t, namedCheck); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "4" {
				t.Errorf("the first check after the erase: %d, %s remaining; want 200, 4", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
			}
			if resp := p.check(t, fmt.Sprintf(inlineCheck, 3)); resp.StatusCode != 200 {
				t.Errorf("3 hits of the inline policy after the erase: %d, want 200", resp.StatusCode)
			}
			if code, out := p.call(t, "", "POST", "/v1/leases", fmt.Sprintf(leaseBody, 3)); code != 200 && code != 201 {
				t.Errorf("a lease of all 3 units after the erase: %d %v", code, out)
			}
			if log := p.log(); strings.Contains(log, rawMark) {
				t.Errorf("the logs hold the raw key:\n%s", log)
			}
		})
	}
}

// sendPersonalTraffic spends, under rawKey, a configured policy past its
// limit (its penalty box too), an inline one, a lease, and blocks the key.
func sendPersonalTraffic(t *testing.T, p *process) {
	t.Helper()
	denied := 0
	for range 7 {
		if p.check(t, namedCheck).StatusCode == 429 {
			denied++
		}
	}
	if denied != 2 {
		t.Fatalf("7 checks of a limit of 5: %d denied, want 2", denied)
	}
	if resp := p.check(t, fmt.Sprintf(inlineCheck, 2)); resp.StatusCode != 200 {
		t.Fatalf("inline check: %d", resp.StatusCode)
	}
	if code, out := p.call(t, "", "POST", "/v1/leases", fmt.Sprintf(leaseBody, 1)); code != 200 && code != 201 {
		t.Fatalf("lease: %d %v", code, out)
	}
	if code, out := p.call(t, "", "POST", "/v1/tenants/acme/blocks", `{"policy":"api","parts":{"user":"`+rawKey+`"},"seconds":600,"reason":"abuse"}`); code != 201 {
		t.Fatalf("block: %d %v", code, out)
	}
}

// dashboardAnswers are the admin API's answers that list keys, by name.
func dashboardAnswers(t *testing.T, p *process) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, req := range map[string][2]string{
		"top":          {"GET", "/v1/insight/top?policy=api&n=20"},
		"tenant top":   {"GET", "/v1/tenants/acme/insight/top?policy=api&n=20"},
		"inline top":   {"GET", "/v1/tenants/acme/insight/top?policy=mine&n=20"},
		"insight":      {"GET", "/v1/insight?seconds=300"},
		"blocks":       {"GET", "/v1/tenants/acme/blocks"},
		"audit":        {"GET", "/v1/tenants/acme/audit?n=50"},
		"try":          {"POST", "/v1/insight/try"},
		"tenant try":   {"POST", "/v1/tenants/acme/insight/try"},
		"tenant":       {"GET", "/v1/tenants/acme"},
		"policies":     {"GET", "/v1/policies"},
		"insight acme": {"GET", "/v1/tenants/acme/insight?seconds=300"},
	} {
		var body io.Reader
		if req[0] == "POST" {
			body = strings.NewReader(`{"policy":{"name":"api","algorithm":"fixed_window","limit":1,"window":"1m"},"seconds":3600,"top":20}`)
		}
		r, err := http.NewRequest(req[0], "http://"+p.addr+req[1], body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 404 { // 404: no sample on this node since its start
			t.Fatalf("%s %s: %d %s", req[0], req[1], resp.StatusCode, b)
		}
		out[name] = string(b)
	}
	return out
}

// isAudit reports whether a store's item, as text, is an entry of the
// audit trail.
func isAudit(item string) bool { return strings.Contains(item, `"action":"`) }

func anyContains(items []string, s string) bool {
	for _, it := range items {
		if strings.Contains(it, s) {
			return true
		}
	}
	return false
}

// stopGently stops p with SIGTERM and waits for its exit.
func stopGently(t *testing.T, p *process) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-p.done
	p.done <- err // for the cleanup
	if err != nil {
		t.Fatalf("exit on SIGTERM: %v", err)
	}
}

// pebbleItems is every key and value of the Pebble database in dir.
func pebbleItems(t *testing.T, dir string) []string {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	iter, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Close()
	var out []string
	for iter.First(); iter.Valid(); iter.Next() {
		out = append(out, string(bytes.Clone(iter.Key()))+" = "+string(iter.Value()))
	}
	if err := iter.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dynamoItems is every item of table, each attribute printed.
func dynamoItems(t *testing.T, endpoint, table string) []string {
	t.Helper()
	db := dynamotest.NewClient(endpoint)
	var out []string
	in := &dynamodb.ScanInput{TableName: &table, ConsistentRead: new(bool)}
	*in.ConsistentRead = true
	for {
		page, err := db.Scan(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			var b strings.Builder
			for name, v := range item {
				fmt.Fprintf(&b, "%s=%v ", name, attrText(v))
			}
			out = append(out, b.String())
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// attrText is an attribute's value as text, binary ones as their bytes.
func attrText(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberB:
		return string(v.Value)
	case *types.AttributeValueMemberSS:
		return strings.Join(v.Value, ",")
	case *types.AttributeValueMemberBS:
		return string(bytes.Join(v.Value, []byte(",")))
	case *types.AttributeValueMemberM:
		var b strings.Builder
		for k, x := range v.Value {
			b.WriteString(k + ":" + attrText(x) + ",")
		}
		return b.String()
	case *types.AttributeValueMemberL:
		var b strings.Builder
		for _, x := range v.Value {
			b.WriteString(attrText(x) + ",")
		}
		return b.String()
	}
	return fmt.Sprint(v)
}

// TestPseudonymisedListedKeys: with --pseudonymise-keys, a key given as
// the API lists it but raw (user=RAWBLOCKKEY) is refused, naming key, by a
// block, a lift and an erase, and reaches neither the blocks nor the audit
// trail; the CLI blocks and lifts by parts, so that its lift finds the
// block, and a lift that finds nothing exits 2.
func TestPseudonymisedListedKeys(t *testing.T) {
	t.Setenv("SLUICE_KEY_SECRET", keySecret)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(privacyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--pseudonymise-keys", "--config", cfg, "--store", "memory")
	for _, r := range [][3]string{
		{"POST", "/v1/tenants/acme/blocks", `{"policy":"api","key":"user=RAWBLOCKKEY","seconds":600}`},
		{"DELETE", "/v1/tenants/acme/blocks?policy=api&key=user%3DRAWLIFTKEY", ""},
		{"DELETE", "/v1/tenants/acme/blocks", `{"policy":"api","key":"user=RAWLIFTKEY"}`},
		{"POST", "/v1/tenants/acme/erase", `{"key":"user=RAWERASEKEY"}`},
	} {
		if code, out := p.call(t, "", r[0], r[1], r[2]); code != 400 || out["field"] != "key" || !strings.Contains(fmt.Sprint(out["message"]), "parts") {
			t.Errorf("%s %s %s: %d %v, want 400 naming key and telling of parts", r[0], r[1], r[2], code, out)
		}
	}
	for what, body := range dashboardAnswers(t, p) {
		if strings.Contains(body, "RAW") {
			t.Errorf("%s holds a refused raw key: %s", what, body)
		}
	}

	env := []string{"SLUICE_SERVER=http://" + p.addr}
	r := sluiceCLI(t, env, "block", "--tenant", "acme", "--policy", "api", "--key", "user=dave", "--for", "10m").want(t, 0, "block")
	if !strings.Contains(r.stdout, "key=user=~") {
		t.Fatalf("block: %q, want the key as its pseudonym", r.stdout)
	}
	remove := []string{"block", "remove", "--tenant", "acme", "--policy", "api", "--key", "user=dave"}
	if r := sluiceCLI(t, env, remove...).want(t, 0, remove...); !strings.Contains(r.stdout, "block=true") {
		t.Errorf("block remove: %q, want the block lifted", r.stdout)
	}
	if _, out := p.call(t, "", "GET", "/v1/tenants/acme/blocks", ""); len(out["blocks"].([]any)) != 0 {
		t.Errorf("blocks after the lift: %v, want none", out)
	}
	if r := sluiceCLI(t, env, remove...).want(t, 2, remove...); !strings.Contains(r.stderr, "no block or penalty") {
		t.Errorf("a lift of nothing: %q, want it said", r.stderr)
	}
}

// TestErasePartialDynamoDB: an erase whose DynamoDB delete fails (throttled
// at every try the store allows) answers 503 and is recorded all
// the same, marked partial; its retry finishes, and the key's next check
// starts from a full limit.
func TestErasePartialDynamoDB(t *testing.T) {
	t.Setenv("SLUICE_KEY_SECRET", keySecret)
	t.Setenv("AWS_MAX_ATTEMPTS", "1") // one try a request: one fault fails it
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(privacyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	table := dynamotest.TableName(t)
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	if err := dynamostore.CreateTable(dynamotest.Context(t), dynamotest.NewClient(px.Endpoint), table); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--pseudonymise-keys", "--config", cfg, "--store", "dynamodb", "--dynamodb-endpoint", px.Endpoint, "--dynamodb-table", table)
	for range 3 {
		p.check(t, namedCheck)
	}
	erase := `{"parts":{"user":"` + rawKey + `"}}`
	// Every try of the erase's first delete: the store sends a write
	// again while DynamoDB throttles it, up to its MaxAttempts (default 4).
	px.FailNext(4, "ThrottlingException")
	if code, out := p.call(t, "", "POST", "/v1/tenants/acme/erase", erase); code != 503 {
		t.Fatalf("an erase whose delete fails: %d %v, want 503", code, out)
	}
	_, audit := p.call(t, "", "GET", "/v1/tenants/acme/audit?n=1", "")
	entries, _ := audit["entries"].([]any)
	if len(entries) != 1 {
		t.Fatalf("the trail after the failed erase: %v", audit)
	}
	e := entries[0].(map[string]any)
	if after, _ := e["after"].(map[string]any); e["action"] != "erase" || after["partial"] != true || after["failed"] != "counters" {
		t.Fatalf("the trail's last entry after the failed erase: %v, want an erase marked partial, failed in its counters", e)
	}
	if code, out := p.call(t, "", "POST", "/v1/tenants/acme/erase", erase); code != 200 || out["counters"].(float64) < 1 {
		t.Fatalf("the retry: %d %v, want 200 and the counter deleted", code, out)
	}
	if resp := p.check(t, namedCheck); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("the first check after the retry: %d, %s remaining; want 200, 4", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
}
