// Package tenancy answers, in one place, "who is this tenant and what may
// it do": it reads a tenant from the tenant store and the configuration
// file as one view, resolves the configured policies a request names into
// the engine's checks (tier and overrides applied, the counters' keys made
// from the request's key parts, the operator's blocks), and changes a
// tenant over the version it read, again when another writer changed it
// meanwhile.
//
// A tenant's creation is part of its identity: one deleted and created
// again under the same id is another tenant, with none of the earlier
// one's sessions, lease tokens or counters (Tenant.Since, Tenant.Epoch).
//
// It owns, besides, who a request comes from and what a tenant's tokens
// name: API keys and the principals they authenticate (auth.go), lease
// tokens and their secrets (leases.go), the administration of tenants,
// their keys and their blocks with its audit trail (admin.go, blocks.go,
// audit.go), sessions (sessions.go), the hooks told of deletions, which
// the gateway subscribes to (hooks.go), a tenant's weight on an upstream
// quota (upstreams.go), and the tenant that counts an Envoy domain
// (envoy.go).
//
// Every front door (the HTTP API, the WebSocket gateway, the upstreams,
// the dashboard's routes, Envoy's service) asks it; none reads the tenant store or merges
// the file's entries itself, so that they cannot disagree. Transports
// decode, call it, and encode.
package tenancy

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/logevery"
	"github.com/sluicehq/sluice/internal/pseudo"
)

// Options configure a Service. Store, Sessions and Audit are required,
// and Secrets unless Store keeps them: the stores are the server's to
// choose (internal/server).
type Options struct {
	Store sluice.TenantStore
	// Secrets keeps the tenants' lease-token keys, shared by every node
	// of the store. Default: Store, if it keeps secrets.
	Secrets sluice.SecretStore
	// Sessions keeps WebSocket sessions.
	Sessions sluice.SessionStore
	// Audit keeps the trail of changes to tenants. Default: Store, if it
	// keeps one.
	Audit  sluice.AuditLog
	Config func() *config.Config // the configuration now: reloads take effect on the next call; default config.Default()
	// AdminKey, if set, is the admin's bearer token, and every request
	// must authenticate (Authenticate) with it or a tenant's API key.
	// Empty: no authentication, everyone is the admin, for a server bound
	// to loopback.
	AdminKey string
	// StoreTimeout bounds each read of the store on a request's path
	// (tenants, API keys, secrets; 0: the caller's context alone): a
	// store slower than that is unavailable.
	StoreTimeout time.Duration
	Now          func() time.Time
	// Logger receives what the store failed to do. Default: discard.
	Logger *slog.Logger
	// Pseudonyms, if set, makes every key given at the entry its
	// pseudonym (pseudo.go); nil keeps keys as given.
	Pseudonyms *pseudo.Keyer
}

// Service is the tenant layer. It is safe for concurrent use.
type Service struct {
	opts Options
	// keys holds the API keys last read, for a store that fails
	// (apiKey); secrets the tenants' lease secrets read so far
	// (leaseSecret).
	keys    cache[sluice.APIKey]
	secrets cache[[]byte]
	hooks   hooks
	// authLog and weightLog bound the lines of a store's failure, which
	// every request meets during an outage, to one an interval.
	authLog, weightLog logevery.Gate
}

// New returns a Service. It panics if a required store is missing: a
// wiring mistake, said at once rather than at the first request.
func New(o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Config == nil {
		def := config.Default()
		o.Config = func() *config.Config { return def }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if ss, ok := o.Store.(sluice.SecretStore); ok && o.Secrets == nil {
		o.Secrets = ss
	}
	if a, ok := o.Store.(sluice.AuditLog); ok && o.Audit == nil {
		o.Audit = a
	}
	for name, missing := range map[string]bool{"Store": o.Store == nil, "Secrets": o.Secrets == nil,
		"Sessions": o.Sessions == nil, "Audit": o.Audit == nil} {
		if missing {
			panic("tenancy.New: Options." + name + " is required")
		}
	}
	return &Service{opts: o, keys: cache[sluice.APIKey]{max: maxHeldKeys}, secrets: cache[[]byte]{max: maxCachedSecrets}}
}

// Tenant is a tenant as every front door sees it: its record in the
// tenant store (if any) and its entry in the configuration file (if any),
// under one configuration.
type Tenant struct {
	ID string
	// Record is the stored tenant; nil for a tenant of the file alone.
	Record *sluice.Tenant
	// InFile reports whether the configuration file names the tenant.
	InFile bool
	cfg    *config.Config
}

// Since is when the tenant was created: sessions, lease tokens and keys
// counted before it belong to an earlier tenant of the same id, deleted
// since. Zero for a tenant of the file alone.
func (t Tenant) Since() time.Time {
	if t.Record == nil || t.Record.File {
		return time.Time{}
	}
	return t.Record.CreatedAt
}

// Epoch is the epoch of the tenant's counters (sluice.Tenant.Epoch), which
// every check made for it carries: zero for a tenant of the file, or one
// created before counters had epochs.
func (t Tenant) Epoch() int64 {
	if t.Record == nil || t.Record.File {
		return 0
	}
	return t.Record.Epoch
}

// FileOnly reports whether the tenant's limits are the configuration
// file's alone: a tenant of the file with no record, or with the record
// that holds its blocks and keys (sluice.Tenant.File).
func (t Tenant) FileOnly() bool {
	return t.InFile && (t.Record == nil || t.Record.File)
}

// Tier is the tenant's tier: the store's, else the file's, else the
// configuration's default.
func (t Tenant) Tier() string { return t.cfg.Tier(t.Record, t.ID) }

// Settings are the tenant's gateway settings: the store's, then the
// file's, then the defaults, field by field.
func (t Tenant) Settings() sluice.TenantSettings { return t.cfg.Settings(t.Record, t.ID) }

// Resolve returns the configured policies a request of the tenant to
// endpoint (or to the policies names) is decided by: tier, file and store
// overrides applied, in that order.
func (t Tenant) Resolve(endpoint string, names []string) ([]config.Resolved, error) {
	return t.cfg.Resolve(t.Record, t.ID, endpoint, names)
}

// BlockedUntil is the end of the operator's live block of key under
// policy, or zero.
func (t Tenant) BlockedUntil(policy, key string, now time.Time) time.Time {
	if t.Record == nil || len(t.Record.Blocks) == 0 {
		return time.Time{}
	}
	until, _ := t.Record.Blocked(policy, key, now)
	return until
}

// read reads id from the store under the store's deadline: a store that
// fails or misses the deadline is KindUnavailable.
func (s *Service) read(ctx context.Context, id string) (sluice.Tenant, error) {
	if s.opts.StoreTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.StoreTimeout)
		defer cancel()
	}
	t, err := s.opts.Store.GetTenant(ctx, id)
	if err != nil && sluice.KindOf(err) != sluice.KindNotFound && ctx.Err() != nil {
		err = &sluice.Error{Op: "tenancy.read", Kind: sluice.KindUnavailable, Err: err}
	}
	return t, err
}

// Stored returns tenant id's record in the store: sluice.ErrTenantNotFound
// if the store has none, whether or not the file names it.
func (s *Service) Stored(ctx context.Context, id string) (sluice.Tenant, error) {
	return s.read(ctx, id)
}

// Lookup returns tenant id: sluice.ErrTenantNotFound if neither the store
// nor the file knows it, the store's error if it failed.
func (s *Service) Lookup(ctx context.Context, id string) (Tenant, error) {
	t, storeErr := s.View(ctx, id)
	switch {
	case storeErr != nil:
		return t, storeErr
	case t.Record == nil && !t.InFile:
		return t, sluice.ErrTenantNotFound
	}
	return t, nil
}

// View returns what is known of tenant id, known or not: a tenant neither
// the store nor the file names is decided by the configuration's defaults.
// If the store failed, the view is the file's alone and storeErr says why:
// enough for the fail modes of its policies, not for counting.
func (s *Service) View(ctx context.Context, id string) (t Tenant, storeErr error) {
	cfg := s.opts.Config()
	_, inFile := cfg.Tenants[id]
	t = Tenant{ID: id, InFile: inFile, cfg: cfg}
	switch rec, err := s.read(ctx, id); {
	case err == nil:
		t.Record = &rec
	case sluice.KindOf(err) != sluice.KindNotFound:
		return t, err
	}
	return t, nil
}

// KeyParts are a request's key parts, by name; IP, if set, gives the
// client's address for a policy keyed by "ip" that the parts lack.
type KeyParts struct {
	Parts map[string]string
	IP    func() (string, bool)
	// Hide, if set, makes each part's value its pseudonym (pseudo.go).
	Hide func(name, value string) string
}

// Checks resolves the configured policies a request of tenant id names
// (an endpoint, or policies by name) into the engine's checks: each
// policy as the tenant's tier and overrides make it, its counter's key
// made of the request's key parts, and the operator's block of that key.
// If the tenant store failed, the checks are the file's alone and
// storeErr says why: they are for the fail modes, not for counting.
func (s *Service) Checks(ctx context.Context, id, endpoint string, names []string, parts KeyParts) (checks []sluice.Check, storeErr, err error) {
	t, storeErr := s.View(ctx, id)
	rs, err := t.Resolve(endpoint, names)
	if err != nil {
		return nil, nil, err
	}
	parts = s.hide(id, parts)
	now := s.opts.Now()
	checks = make([]sluice.Check, len(rs))
	for i, rp := range rs {
		key, err := CounterKey(rp, parts)
		if err != nil {
			return nil, nil, err
		}
		checks[i] = sluice.Check{Policy: rp.Policy, Key: key, BlockedUntil: t.BlockedUntil(rp.Policy.Name, key, now), Epoch: t.Epoch()}
	}
	return checks, storeErr, nil
}

// CounterKey joins the key parts policy rp is keyed by, each
// length-prefixed so that no two sets of parts give the same key. A
// policy keyed by "ip" takes the client's address if the parts lack it.
func CounterKey(rp config.Resolved, parts KeyParts) (string, error) {
	var b []byte
	for _, name := range rp.Key {
		v, ok := parts.Parts[name]
		if !ok && name == "ip" && parts.IP != nil {
			v, ok = parts.IP()
		}
		if !ok {
			return "", sluice.Invalid("key."+name, "is needed by policy %q", rp.Policy.Name)
		}
		if parts.Hide != nil {
			v = parts.Hide(name, v)
		}
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return string(b), nil
}

// Adopt makes sure tenant id has a record in the store: a tenant of the
// configuration file with none gets one (sluice.Tenant.File), to hold its
// blocks and API keys. ErrTenantNotFound for a tenant neither knows.
func (s *Service) Adopt(ctx context.Context, id string) error {
	t, err := s.Lookup(ctx, id)
	if err != nil || t.Record != nil {
		return err
	}
	err = s.opts.Store.CreateTenant(ctx, sluice.Tenant{ID: id, File: true, CreatedAt: s.opts.Now().UTC(), UpdatedAt: s.opts.Now().UTC()})
	if errors.Is(err, sluice.ErrTenantExists) {
		return nil // another writer adopted it first
	}
	return err
}

// maxWrites bounds the tries of one change of a tenant against the
// changes of other writers (Update).
const maxWrites = 8

// Update changes stored tenant id: it reads the tenant, has change make
// the new record from it, and writes it over the version read; if another
// writer (of this node or another) changed the tenant in between, it
// reads it and changes it again, up to maxWrites times. A change that
// answers an error is not tried again (ErrTenantChanged too: a writer's
// own precondition). It returns the tenant read last and the tenant
// written, at its new version.
func (s *Service) Update(ctx context.Context, id string, change func(sluice.Tenant) (sluice.Tenant, error)) (old, t sluice.Tenant, err error) {
	for try := 1; ; try++ {
		if old, err = s.opts.Store.GetTenant(ctx, id); err != nil {
			return old, t, err
		}
		if t, err = change(old); err != nil {
			return old, t, err
		}
		t.Version = old.Version
		err = s.opts.Store.UpdateTenant(ctx, t)
		if err == nil {
			t.Version++
			return old, t, nil
		}
		if !errors.Is(err, sluice.ErrTenantChanged) || try == maxWrites {
			return old, t, err
		}
		// Writers that met step apart: a few milliseconds, more each try.
		select {
		case <-time.After(time.Duration(try) * time.Duration(1+rand.IntN(5)) * time.Millisecond):
		case <-ctx.Done():
			return old, t, ctx.Err()
		}
	}
}

// Limit is one configured policy as the tenant's requests are decided by
// it, and where its limit comes from: "policy" (the policy's own),
// "tier" (the tenant's tier), "file" (the file's entry for the tenant) or
// "tenant" (the tenant's stored overrides), the last that sets it.
type Limit struct {
	Policy sluice.Policy
	Key    []string
	From   string
}

// Limits returns every configured policy as the tenant's requests are
// decided by it, by name: the same resolution as its checks (Resolve).
func (t Tenant) Limits() ([]Limit, error) {
	names := t.cfg.PolicyNames()
	if len(names) == 0 {
		return []Limit{}, nil // a configuration of no policies limits nothing
	}
	rs, err := t.Resolve("", names)
	if err != nil {
		return nil, err
	}
	tier, file := t.cfg.Tiers[t.Tier()], t.cfg.Tenants[t.ID].Overrides
	out := make([]Limit, len(rs))
	for i, rp := range rs {
		from := "policy"
		if o, ok := tier[names[i]]; ok && o.Limit != nil {
			from = "tier"
		}
		if o, ok := file[names[i]]; ok && o.Limit != nil {
			from = "file"
		}
		if t.Record != nil {
			if o, ok := t.Record.Overrides[names[i]]; ok && o.Limit != nil {
				from = "tenant"
			}
		}
		out[i] = Limit{Policy: rp.Policy, Key: rp.Key, From: from}
	}
	return out, nil
}

// ReadableKey returns a configured policy's counter key (CounterKey's
// encoding of parts named names) as people read it and as the API shows
// it: "user=bot-7", parts in the policy's order joined by "&", each name
// and value escaped as in a URL's query, so that it parses back
// (ParseReadableKey) whatever the values hold. ok is false if raw is not
// such a key.
func ReadableKey(names []string, raw string) (string, bool) {
	var b strings.Builder
	for i, want := range names {
		name, v, rest, ok := nextPart(raw)
		if !ok || name != want {
			return "", false
		}
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(name))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(v))
		raw = rest
	}
	return b.String(), raw == ""
}

// nextPart reads one length-prefixed name and value of a counter key.
func nextPart(raw string) (name, value, rest string, ok bool) {
	for _, dst := range []*string{&name, &value} {
		n, k := binary.Uvarint([]byte(raw[:min(len(raw), binary.MaxVarintLen64)]))
		if k <= 0 || uint64(len(raw)-k) < n {
			return "", "", "", false
		}
		*dst, raw = raw[k:k+int(n)], raw[k+int(n):]
	}
	return name, value, raw, true
}

// ParseReadableKey returns the counter key that s, a key as ReadableKey
// shows it, names for a policy keyed by names: every part, and no other.
func ParseReadableKey(names []string, s string) (string, bool) {
	q, err := url.ParseQuery(s)
	if err != nil || len(q) != len(names) {
		return "", false
	}
	parts := map[string]string{}
	for _, name := range names {
		vs := q[name]
		if len(vs) != 1 {
			return "", false
		}
		parts[name] = vs[0]
	}
	key, err := CounterKey(config.Resolved{Key: names}, KeyParts{Parts: parts})
	return key, err == nil
}
