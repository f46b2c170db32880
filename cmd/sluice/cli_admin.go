package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/tenancy"
)

// The operator's commands over the administration routes: tenants
// (GET, POST, DELETE /v1/tenants), the heaviest keys the server saw
// (/v1/.../insight/top: the API lists no store's counters) and blocks
// (/v1/tenants/{id}/blocks). The Go client holds decisions alone, so these
// call the routes through api.do.

// cliCmd is one subcommand: its flags' set and what it does with its
// operands.
type cliCmd struct {
	usage string
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, a *api, operands []string, out *output) error
}

// output is where a command prints, and how.
type output struct {
	w    io.Writer
	json bool
}

// raw prints a JSON answer as it came.
func (o *output) raw(b []byte) {
	o.w.Write(b)
	if len(b) == 0 || b[len(b)-1] != '\n' {
		fmt.Fprintln(o.w)
	}
}

// runCLI parses args for c and runs it against the server the flags name.
func runCLI(ctx context.Context, name string, c cliCmd, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var f apiFlags
	f.register(fs)
	if c.flags != nil {
		c.flags(fs)
	}
	if helpAsked(args) {
		return printHelp(fs, c.usage, stdout)
	}
	operands, err := parseCLI(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	a, err := f.newAPI(stderr)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := c.run(ctx, a, operands, &output{w: stdout, json: f.json}); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// subcommand runs the subcommand of args among subs, def if args name
// none.
func subcommand(ctx context.Context, name string, subs map[string]cliCmd, def string, args []string, stdout, stderr io.Writer) error {
	sub := def
	if len(args) > 0 {
		if _, ok := subs[args[0]]; ok {
			sub, args = args[0], args[1:]
		}
	}
	return runCLI(ctx, name+" "+sub, subs[sub], args, stdout, stderr)
}

// table prints rows under header, in aligned columns.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// tenantPath is the route of tenant id, with sub after it.
func tenantPath(id, sub string) string {
	return "/v1/tenants/" + url.PathEscape(id) + sub
}

// one returns the only operand, named what in the error otherwise.
func one(operands []string, what string) (string, error) {
	if len(operands) != 1 {
		return "", fmt.Errorf("want one %s, got %d operands", what, len(operands))
	}
	return operands[0], nil
}

// --- sluice tenants

func tenantsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var tier string
	subs := map[string]cliCmd{
		"list": {usage: "usage: sluice tenants [list] [flags]\n       sluice tenants get|create|delete|keys [flags] TENANT\n\nLists the tenants: the store's and the configuration file's.\n\nFlags:\n",
			run: listTenants},
		"get": {usage: "usage: sluice tenants get [flags] TENANT\n\nShows a tenant and the limits its requests are decided by.\n\nFlags:\n",
			run: getTenant},
		"create": {usage: "usage: sluice tenants create [flags] TENANT\n\nCreates a tenant (the admin's).\n\nFlags:\n",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&tier, "tier", "", "the tenant's `tier` (default: the configuration's)")
			},
			run: func(ctx context.Context, a *api, operands []string, out *output) error {
				return createTenant(ctx, a, operands, tier, out)
			}},
		"keys": {usage: "usage: sluice tenants keys [flags] TENANT\n\nLists a tenant's API keys (never their secrets; POST /v1/tenants/{id}/keys makes one).\n\nFlags:\n",
			run: listAPIKeys},
		"delete": {usage: "usage: sluice tenants delete [flags] TENANT\n\nDeletes a tenant and its API keys (the admin's).\n\nFlags:\n",
			run: deleteTenant},
	}
	return subcommand(ctx, "tenants", subs, "list", args, stdout, stderr)
}

func listTenants(ctx context.Context, a *api, operands []string, out *output) error {
	if len(operands) > 0 {
		return fmt.Errorf("unexpected %q (sluice tenants get TENANT shows one)", operands[0])
	}
	ts, b, err := tenants(ctx, a)
	if err != nil {
		return err
	}
	if out.json {
		out.raw(b)
		return nil
	}
	rows := make([][]string, len(ts))
	for i, t := range ts {
		rows[i] = []string{t.ID, orDash(t.Tier), sourceOf(t), timeOf(t.CreatedAt)}
	}
	table(out.w, []string{"TENANT", "TIER", "SOURCE", "CREATED"}, rows)
	return nil
}

// tenants returns the tenants the key reaches, and the answer's body.
func tenants(ctx context.Context, a *api) ([]tenancy.TenantDoc, []byte, error) {
	var ts struct {
		Tenants []tenancy.TenantDoc `json:"tenants"`
	}
	b, err := a.do(ctx, "GET", "/v1/tenants", nil, &ts)
	return ts.Tenants, b, err
}

// sourceOf says where a tenant is kept.
func sourceOf(t tenancy.TenantDoc) string {
	if t.Source != "" {
		return t.Source
	}
	return "store v" + strconv.FormatInt(t.Version, 10)
}

func timeOf(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func getTenant(ctx context.Context, a *api, operands []string, out *output) error {
	id, err := one(operands, "TENANT")
	if err != nil {
		return err
	}
	var t tenancy.TenantDoc
	b, err := a.do(ctx, "GET", tenantPath(id, ""), nil, &t)
	if err != nil {
		return fmt.Errorf("tenant %q: %w", id, err)
	}
	if out.json {
		out.raw(b)
		return nil
	}
	var ls struct {
		Tier   string `json:"tier"`
		Limits []struct {
			Name      string   `json:"name"`
			Algorithm string   `json:"algorithm"`
			Limit     int64    `json:"limit"`
			Burst     int64    `json:"burst"`
			Window    string   `json:"window"`
			Key       []string `json:"key"`
			Shadow    bool     `json:"shadow"`
			From      string   `json:"from"`
		} `json:"limits"`
	}
	if _, err := a.do(ctx, "GET", tenantPath(id, "/limits"), nil, &ls); err != nil {
		return err
	}
	fmt.Fprintf(out.w, "tenant:  %s\ntier:    %s\nsource:  %s\ncreated: %s\nupdated: %s\n\n",
		t.ID, orDash(ls.Tier), sourceOf(t), timeOf(t.CreatedAt), timeOf(t.UpdatedAt))
	rows := make([][]string, len(ls.Limits))
	for i, l := range ls.Limits {
		limit := strconv.FormatInt(l.Limit, 10)
		if l.Burst != 0 {
			limit += " burst " + strconv.FormatInt(l.Burst, 10)
		}
		if l.Shadow {
			limit += " (shadow)"
		}
		rows[i] = []string{l.Name, l.Algorithm, limit, orDash(l.Window), strings.Join(l.Key, ","), l.From}
	}
	table(out.w, []string{"POLICY", "ALGORITHM", "LIMIT", "WINDOW", "KEY", "FROM"}, rows)
	return nil
}

func createTenant(ctx context.Context, a *api, operands []string, tier string, out *output) error {
	id, err := one(operands, "TENANT")
	if err != nil {
		return err
	}
	var t tenancy.TenantDoc
	b, err := a.do(ctx, "POST", "/v1/tenants", map[string]string{"id": id, "tier": tier}, &t)
	if err != nil {
		return err
	}
	if out.json {
		out.raw(b)
		return nil
	}
	fmt.Fprintf(out.w, "created tenant %s (tier %s)\n", t.ID, orDash(t.Tier))
	return nil
}

func deleteTenant(ctx context.Context, a *api, operands []string, out *output) error {
	id, err := one(operands, "TENANT")
	if err != nil {
		return err
	}
	b, err := a.do(ctx, "DELETE", tenantPath(id, ""), nil, nil)
	if err != nil {
		return fmt.Errorf("tenant %q: %w", id, err)
	}
	if out.json {
		out.raw(b)
		return nil
	}
	fmt.Fprintf(out.w, "deleted tenant %s\n", id)
	return nil
}

func listAPIKeys(ctx context.Context, a *api, operands []string, out *output) error {
	id, err := one(operands, "TENANT")
	if err != nil {
		return err
	}
	var ks struct {
		Keys []tenancy.APIKey `json:"keys"`
	}
	b, err := a.do(ctx, "GET", tenantPath(id, "/keys"), nil, &ks)
	if err != nil {
		return fmt.Errorf("tenant %q: %w", id, err)
	}
	if out.json {
		out.raw(b)
		return nil
	}
	rows := make([][]string, len(ks.Keys))
	for i, k := range ks.Keys {
		rows[i] = []string{k.ID, orDash(k.Name), timeOf(&k.CreatedAt)}
	}
	table(out.w, []string{"KEY", "NAME", "CREATED"}, rows)
	return nil
}

// --- sluice keys

const keysUsage = `usage: sluice keys [flags]

Lists the heaviest keys the server saw in the last hour (the dashboard's
insight: each policy's 100 heaviest keys by hits and by denials, summed
over the nodes), with each key's state now: remaining, reset, and the end
of a block or penalty. The API lists no store's counters: a key not
among the heaviest is read with sluice check --cost 0.

Flags:
`

func keysCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var tenant, policy string
	var n int
	return runCLI(ctx, "keys", cliCmd{usage: keysUsage,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&tenant, "tenant", os.Getenv("SLUICE_TENANT"), "the `tenant` (or $SLUICE_TENANT); none: every tenant's (the admin's)")
			fs.StringVar(&policy, "policy", "", "a configured `policy`; none: every one")
			fs.IntVar(&n, "n", 20, "the most keys of each policy, 1 to 100")
		},
		run: func(ctx context.Context, a *api, operands []string, out *output) error {
			if len(operands) > 0 {
				return fmt.Errorf("unexpected %q", operands[0])
			}
			return listKeys(ctx, a, tenant, policy, n, out)
		}}, args, stdout, stderr)
}

// topKey is a key of a policy's top list on the wire.
type topKey struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	Count  int64  `json:"count"`
	State  *struct {
		Limit     int64     `json:"limit"`
		Remaining int64     `json:"remaining"`
		ResetAt   time.Time `json:"resetAt"`
	} `json:"state"`
	PenaltyUntil *time.Time `json:"penaltyUntil"`
	BlockedUntil *time.Time `json:"blockedUntil"`
}

// keyRow is a key's row: its hits and denials, its state.
type keyRow struct {
	policy        string
	top           topKey
	hits, denials int64
}

func listKeys(ctx context.Context, a *api, tenant, policy string, n int, out *output) error {
	policies := []string{policy}
	if policy == "" {
		ps, err := configuredPolicies(ctx, a)
		if err != nil {
			return err
		}
		policies = policies[:0]
		for _, p := range ps {
			policies = append(policies, p.Name)
		}
	}
	route := "/v1/insight/top"
	if tenant != "" {
		route = tenantPath(tenant, "/insight/top")
	}
	var rows []*keyRow
	answers := map[string]json.RawMessage{}
	for _, p := range policies {
		var top struct {
			Hits, Denials []topKey
		}
		q := url.Values{"policy": {p}, "n": {strconv.Itoa(n)}, "state": {"true"}}
		b, err := a.do(ctx, "GET", route+"?"+q.Encode(), nil, &top)
		if err != nil {
			return err
		}
		answers[p] = b
		byKey := map[string]*keyRow{}
		for i, list := range [][]topKey{top.Hits, top.Denials} {
			for _, k := range list {
				id := k.Tenant + "\x00" + k.Key
				r := byKey[id]
				if r == nil {
					r = &keyRow{policy: p, top: k}
					byKey[id] = r
					rows = append(rows, r)
				}
				if i == 0 {
					r.hits = k.Count
				} else {
					r.denials = k.Count
				}
			}
		}
	}
	if out.json {
		b, err := json.Marshal(answers) // each policy's answer, by name
		if err != nil {
			return err
		}
		out.raw(b)
		return nil
	}
	now := time.Now()
	cells := make([][]string, len(rows))
	for i, r := range rows {
		remaining, reset := "-", "-"
		if s := r.top.State; s != nil {
			remaining = fmt.Sprintf("%d/%d", s.Remaining, s.Limit)
			reset = max(0, s.ResetAt.Sub(now)).Round(time.Second).String()
		}
		cells[i] = []string{r.policy, r.top.Tenant, r.top.Key, strconv.FormatInt(r.hits, 10), strconv.FormatInt(r.denials, 10),
			remaining, reset, until(r.top.BlockedUntil, r.top.PenaltyUntil, now)}
	}
	table(out.w, []string{"POLICY", "TENANT", "KEY", "HITS", "DENIALS", "REMAINING", "RESET", "BLOCKED"}, cells)
	return nil
}

// until says how long a key stays blocked by an operator or its penalty.
func until(blocked, penalty *time.Time, now time.Time) string {
	var out []string
	if blocked != nil && blocked.After(now) {
		out = append(out, "block "+blocked.Sub(now).Round(time.Second).String())
	}
	if penalty != nil && penalty.After(now) {
		out = append(out, "penalty "+penalty.Sub(now).Round(time.Second).String())
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// configuredPolicy is a policy of GET /v1/policies.
type configuredPolicy struct {
	Name string   `json:"name"`
	Key  []string `json:"key"`
}

func configuredPolicies(ctx context.Context, a *api) ([]configuredPolicy, error) {
	var ps struct {
		Policies []configuredPolicy `json:"policies"`
	}
	_, err := a.do(ctx, "GET", "/v1/policies", nil, &ps)
	return ps.Policies, err
}

// --- sluice block

const blockUsage = `usage: sluice block [flags] --tenant T --key name=value --for DURATION
       sluice block list [--tenant T]
       sluice block remove [flags] --tenant T --key name=value

Blocks one key of a tenant: until the block ends, every request that
checks a blocked policy for that key is denied. Without --policy, the
key is blocked (or lifted) in every configured policy keyed by exactly the
parts given (--key user=u1: every policy keyed by user). remove lifts the
key's block and its penalty box, and exits 2 if it found neither. The key
is sent as its parts, which the server makes the key it stores (a
pseudonym under --pseudonymise-keys). Blocks and lifts are the admin's,
and recorded in the tenant's audit trail.

Flags:
`

// blockFlags are the flags of a block and of its removal.
type blockFlags struct {
	tenant   string
	parts    keyParts
	policies policyNames
	dur      time.Duration
	reason   string
}

// policyNames is a repeated --policy flag.
type policyNames []string

func (p *policyNames) String() string     { return strings.Join(*p, ",") }
func (p *policyNames) Set(s string) error { *p = append(*p, s); return nil }

func (b *blockFlags) register(fs *flag.FlagSet, block bool) {
	b.parts = keyParts{}
	fs.StringVar(&b.tenant, "tenant", os.Getenv("SLUICE_TENANT"), "the `tenant` (or $SLUICE_TENANT)")
	fs.Var(b.parts, "key", "a part `name=value` of the key (user=u1), repeated for each part")
	fs.Var(&b.policies, "policy", "a configured `policy`, repeated; none: every one keyed by exactly the parts given")
	if block {
		fs.DurationVar(&b.dur, "for", 0, "how long the block lasts (10m, 2h; at most 720h)")
		fs.StringVar(&b.reason, "reason", "", "why, for the audit trail")
	}
}

func blockCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var b blockFlags
	var listTenant string
	subs := map[string]cliCmd{
		"add": {usage: blockUsage, flags: func(fs *flag.FlagSet) { b.register(fs, true) },
			run: func(ctx context.Context, a *api, operands []string, out *output) error {
				return addBlock(ctx, a, b, operands, out)
			}},
		"list": {usage: blockUsage, flags: func(fs *flag.FlagSet) {
			fs.StringVar(&listTenant, "tenant", os.Getenv("SLUICE_TENANT"), "the `tenant` (or $SLUICE_TENANT); none: every tenant's")
		}, run: func(ctx context.Context, a *api, operands []string, out *output) error {
			return listBlocks(ctx, a, listTenant, operands, out)
		}},
		"remove": {usage: blockUsage, flags: func(fs *flag.FlagSet) { b.register(fs, false) },
			run: func(ctx context.Context, a *api, operands []string, out *output) error {
				return removeBlock(ctx, a, b, operands, out)
			}},
	}
	return subcommand(ctx, "block", subs, "add", args, stdout, stderr)
}

// target checks b's tenant and key and returns the policies it names.
func (b blockFlags) target(ctx context.Context, a *api, operands []string) ([]string, error) {
	switch {
	case len(operands) > 0:
		return nil, fmt.Errorf("unexpected %q", operands[0])
	case b.tenant == "":
		return nil, errors.New("--tenant is required (or $SLUICE_TENANT)")
	case len(b.parts) == 0:
		return nil, errors.New("--key name=value is required (user=u1)")
	case len(b.policies) > 0:
		return b.policies, nil
	}
	ps, err := configuredPolicies(ctx, a)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ps {
		if len(p.Key) == len(b.parts) && !slices.ContainsFunc(p.Key, func(k string) bool { _, ok := b.parts[k]; return !ok }) {
			out = append(out, p.Name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no configured policy is keyed by exactly %s: name one with --policy", strings.Join(slices.Sorted(func(yield func(string) bool) {
			for k := range b.parts {
				if !yield(k) {
					return
				}
			}
		}), ","))
	}
	return out, nil
}

func addBlock(ctx context.Context, a *api, b blockFlags, operands []string, out *output) error {
	if b.dur <= 0 {
		return errors.New("--for is required: how long the block lasts (10m)")
	}
	policies, err := b.target(ctx, a, operands)
	if err != nil {
		return err
	}
	seconds := int64(math.Ceil(b.dur.Seconds()))
	var answers []json.RawMessage
	for _, p := range policies {
		var got tenancy.Block
		body, err := a.do(ctx, "POST", tenantPath(b.tenant, "/blocks"),
			map[string]any{"policy": p, "parts": b.parts, "seconds": seconds, "reason": b.reason}, &got)
		if err != nil {
			return fmt.Errorf("tenant %q, policy %s: %w", b.tenant, p, err)
		}
		answers = append(answers, body)
		if !out.json {
			fmt.Fprintf(out.w, "blocked tenant=%s policy=%s key=%s until=%s\n", b.tenant, p, got.Key, got.Until.UTC().Format(time.RFC3339))
		}
	}
	return out.list(answers)
}

// list prints answers as a JSON array, with --json.
func (o *output) list(answers []json.RawMessage) error {
	if !o.json {
		return nil
	}
	b, err := json.Marshal(answers)
	if err == nil {
		o.raw(b)
	}
	return err
}

func removeBlock(ctx context.Context, a *api, b blockFlags, operands []string, out *output) error {
	policies, err := b.target(ctx, a, operands)
	if err != nil {
		return err
	}
	key := b.parts.String() // as given: user=u1
	var answers []json.RawMessage
	lifted := false
	for _, p := range policies {
		var got struct {
			Block   bool `json:"block"`
			Penalty bool `json:"penalty"`
		}
		// By its parts, as the block was made: the server makes them
		// the key it stores (a pseudonym under --pseudonymise-keys).
		body, err := a.do(ctx, "DELETE", tenantPath(b.tenant, "/blocks"), map[string]any{"policy": p, "parts": b.parts}, &got)
		if err != nil {
			return fmt.Errorf("tenant %q, policy %s: %w", b.tenant, p, err)
		}
		answers = append(answers, body)
		lifted = lifted || got.Block || got.Penalty
		if !out.json {
			fmt.Fprintf(out.w, "lifted tenant=%s policy=%s key=%s block=%t penalty=%t\n", b.tenant, p, key, got.Block, got.Penalty)
		}
	}
	if err := out.list(answers); err != nil {
		return err
	}
	if !lifted {
		return fmt.Errorf("tenant %q: no block or penalty of key %s to lift in %s (sluice block list shows the blocks)", b.tenant, key, strings.Join(policies, ", "))
	}
	return nil
}

func listBlocks(ctx context.Context, a *api, tenant string, operands []string, out *output) error {
	if len(operands) > 0 {
		return fmt.Errorf("unexpected %q", operands[0])
	}
	ids := []string{tenant}
	if tenant == "" {
		ts, _, err := tenants(ctx, a)
		if err != nil {
			return err
		}
		ids = ids[:0]
		for _, t := range ts {
			ids = append(ids, t.ID)
		}
	}
	type row struct {
		Tenant string `json:"tenant"`
		tenancy.Block
	}
	rows := []row{}
	for _, t := range ids {
		var bs struct {
			Blocks []tenancy.Block `json:"blocks"`
		}
		if _, err := a.do(ctx, "GET", tenantPath(t, "/blocks"), nil, &bs); err != nil {
			return fmt.Errorf("tenant %q: %w", t, err)
		}
		for _, b := range bs.Blocks {
			rows = append(rows, row{t, b})
		}
	}
	if out.json {
		b, err := json.Marshal(map[string]any{"blocks": rows})
		if err == nil {
			out.raw(b)
		}
		return err
	}
	now := time.Now()
	cells := make([][]string, len(rows))
	for i, r := range rows {
		cells[i] = []string{r.Tenant, r.Policy, r.Key, r.Until.UTC().Format(time.RFC3339) + " (" + max(0, r.Until.Sub(now)).Round(time.Second).String() + ")",
			orDash(r.By), orDash(r.Reason)}
	}
	table(out.w, []string{"TENANT", "POLICY", "KEY", "UNTIL", "BY", "REASON"}, cells)
	return nil
}
