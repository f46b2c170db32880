package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

var (
	_ sluice.TenantStore = (*Store)(nil)
	_ sluice.SecretStore = (*Store)(nil)
	_ sluice.AuditLog    = (*Store)(nil)
)

// A tenant's records, each under its hash tag (one slot with its
// counters): "t" a hash of the tenant's version (v) and JSON (j), "k" a
// hash of its API keys by id (JSON), "x" a hash of its secrets by name,
// "a" a list of its audit entries (JSON), newest first. The ids of the
// tenants are a set, "tenants" after the prefix, in a slot of its own:
// written before a tenant is created and after it is deleted, so that a
// call cut short leaves an id without a record, which ListTenants skips,
// and never a tenant it cannot list.

func (s *Store) tenantKey(id, kind string) string { return s.opts.Prefix + tag(id) + kind }
func (s *Store) indexKey() string                 { return s.opts.Prefix + "tenants" }

// createScript writes the tenant record KEYS[1] at version 1 unless it
// exists: 1 if written.
var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'v', '1', 'j', ARGV[1])
return 1
`)

// updateScript writes ARGV[2] over the tenant record KEYS[1] at version
// ARGV[1]+1 if its version is ARGV[1]: 1 if written, 0 if it has another,
// -1 if there is none.
var updateScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return -1 end
if v ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', tostring(tonumber(v) + 1), 'j', ARGV[2])
return 1
`)

// putKeyScript sets field ARGV[1] of KEYS[2] to ARGV[2] if the tenant
// record KEYS[1] exists: 1 if written.
var putKeyScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
`)

// secretScript sets field ARGV[1] of KEYS[1] to ARGV[2] unless it is set,
// and answers the field's value.
var secretScript = redis.NewScript(`
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], ARGV[1])
`)

func (s *Store) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, sluice.ErrStoreClosed
	}
	ctx, cancel := s.deadline(ctx)
	return ctx, cancel, nil
}

// CreateTenant implements sluice.TenantStore.
func (s *Store) CreateTenant(ctx context.Context, t sluice.Tenant) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	t.Version = 1
	j, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if err := s.c.SAdd(ctx, s.indexKey(), t.ID).Err(); err != nil {
		return errStore("CreateTenant", err)
	}
	n, err := createScript.Run(ctx, s.c, []string{s.tenantKey(t.ID, "t")}, j).Int()
	if err != nil {
		return errStore("CreateTenant", err)
	}
	if n == 0 {
		return sluice.ErrTenantExists
	}
	return nil
}

// UpdateTenant implements sluice.TenantStore.
func (s *Store) UpdateTenant(ctx context.Context, t sluice.Tenant) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	from := t.Version
	t.Version++
	j, err := json.Marshal(t)
	if err != nil {
		return err
	}
	n, err := updateScript.Run(ctx, s.c, []string{s.tenantKey(t.ID, "t")}, from, j).Int()
	switch {
	case err != nil:
		return errStore("UpdateTenant", err)
	case n < 0:
		return sluice.ErrTenantNotFound
	case n == 0:
		return sluice.ErrTenantChanged
	}
	return nil
}

func decodeTenant(j string) (sluice.Tenant, error) {
	var t sluice.Tenant
	if err := json.Unmarshal([]byte(j), &t); err != nil {
		return sluice.Tenant{}, &sluice.Error{Op: "redisstore.tenant", Kind: sluice.KindInternal, Message: "unreadable tenant record", Err: err}
	}
	return t, nil
}

// GetTenant implements sluice.TenantStore.
func (s *Store) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return sluice.Tenant{}, err
	}
	defer cancel()
	j, err := s.c.HGet(ctx, s.tenantKey(id, "t"), "j").Result()
	if errors.Is(err, redis.Nil) {
		return sluice.Tenant{}, sluice.ErrTenantNotFound
	}
	if err != nil {
		return sluice.Tenant{}, errStore("GetTenant", err)
	}
	return decodeTenant(j)
}

// ListTenants implements sluice.TenantStore: the index's ids, then their
// records in one pipeline (one request per slot on Cluster).
func (s *Store) ListTenants(ctx context.Context) ([]sluice.Tenant, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	ids, err := s.c.SMembers(ctx, s.indexKey()).Result()
	if err != nil {
		return nil, errStore("ListTenants", err)
	}
	slices.Sort(ids)
	cmds := make([]*redis.StringCmd, len(ids))
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGet(ctx, s.tenantKey(id, "t"), "j")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, errStore("ListTenants", err)
	}
	out := make([]sluice.Tenant, 0, len(ids))
	for _, c := range cmds {
		j, err := c.Result()
		if errors.Is(err, redis.Nil) {
			continue // indexed, not (or no longer) created
		}
		if err != nil {
			return nil, errStore("ListTenants", err)
		}
		t, err := decodeTenant(j)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// DeleteTenant implements sluice.TenantStore: the record and the API keys
// in one DEL (one slot), then the id from the index.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	// The record's deletion alone decides whether there was a tenant.
	n, err := s.c.Del(ctx, s.tenantKey(id, "t")).Result()
	if err != nil {
		return errStore("DeleteTenant", err)
	}
	if err := s.c.Del(ctx, s.tenantKey(id, "k")).Err(); err != nil {
		return errStore("DeleteTenant", err)
	}
	if err := s.c.SRem(ctx, s.indexKey(), id).Err(); err != nil {
		return errStore("DeleteTenant", err)
	}
	if n == 0 {
		return sluice.ErrTenantNotFound
	}
	return nil
}

// PutAPIKey implements sluice.TenantStore.
func (s *Store) PutAPIKey(ctx context.Context, k sluice.APIKey) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	j, err := json.Marshal(apiKeyJSON{APIKey: k, Hash: k.Hash})
	if err != nil {
		return err
	}
	n, err := putKeyScript.Run(ctx, s.c, []string{s.tenantKey(k.Tenant, "t"), s.tenantKey(k.Tenant, "k")}, k.ID, j).Int()
	if err != nil {
		return errStore("PutAPIKey", err)
	}
	if n == 0 {
		return sluice.ErrTenantNotFound
	}
	return nil
}

// GetAPIKey implements sluice.TenantStore.
func (s *Store) GetAPIKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return sluice.APIKey{}, err
	}
	defer cancel()
	j, err := s.c.HGet(ctx, s.tenantKey(tenant, "k"), id).Result()
	if errors.Is(err, redis.Nil) {
		return sluice.APIKey{}, sluice.ErrKeyNotFound
	}
	if err != nil {
		return sluice.APIKey{}, errStore("GetAPIKey", err)
	}
	return decodeAPIKey(j)
}

// apiKeyJSON is an APIKey as stored: with its hash, which APIKey's JSON
// leaves out.
type apiKeyJSON struct {
	sluice.APIKey
	Hash []byte `json:"hash"`
}

func decodeAPIKey(j string) (sluice.APIKey, error) {
	var k apiKeyJSON
	if err := json.Unmarshal([]byte(j), &k); err != nil {
		return sluice.APIKey{}, &sluice.Error{Op: "redisstore.apiKey", Kind: sluice.KindInternal, Message: "unreadable API key", Err: err}
	}
	k.APIKey.Hash = k.Hash
	return k.APIKey, nil
}

// ListAPIKeys implements sluice.TenantStore.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	m, err := s.c.HGetAll(ctx, s.tenantKey(tenant, "k")).Result()
	if err != nil {
		return nil, errStore("ListAPIKeys", err)
	}
	out := make([]sluice.APIKey, 0, len(m))
	for _, j := range m {
		k, err := decodeAPIKey(j)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b sluice.APIKey) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteAPIKey implements sluice.TenantStore.
func (s *Store) DeleteAPIKey(ctx context.Context, tenant, id string) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	n, err := s.c.HDel(ctx, s.tenantKey(tenant, "k"), id).Result()
	if err != nil {
		return errStore("DeleteAPIKey", err)
	}
	if n == 0 {
		return sluice.ErrKeyNotFound
	}
	return nil
}

// Secret implements sluice.SecretStore: the first caller's random bytes
// are set if none are, and every caller reads what is set, in one script.
func (s *Store) Secret(ctx context.Context, tenant, name string) ([]byte, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	b := make([]byte, sluice.SecretLen)
	rand.Read(b)
	v, err := secretScript.Run(ctx, s.c, []string{s.tenantKey(tenant, "x")}, name, b).Text()
	if err != nil {
		return nil, errStore("Secret", err)
	}
	if len(v) != sluice.SecretLen {
		return nil, &sluice.Error{Op: "redisstore.Secret", Kind: sluice.KindInternal, Message: "secret " + name + " of tenant " + tenant + " is malformed"}
	}
	return []byte(v), nil
}

// AppendAudit implements sluice.AuditLog. Every entry is kept, as
// pebblestore and dynamostore keep them.
func (s *Store) AppendAudit(ctx context.Context, e sluice.AuditEntry) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	j, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := s.c.LPush(ctx, s.tenantKey(e.Tenant, "a"), j).Err(); err != nil {
		return errStore("AppendAudit", err)
	}
	return nil
}

// ListAudit implements sluice.AuditLog.
func (s *Store) ListAudit(ctx context.Context, tenant string, n int) ([]sluice.AuditEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	l, err := s.c.LRange(ctx, s.tenantKey(tenant, "a"), 0, int64(n-1)).Result()
	if err != nil {
		return nil, errStore("ListAudit", err)
	}
	out := make([]sluice.AuditEntry, len(l))
	for i, j := range l {
		if err := json.Unmarshal([]byte(j), &out[i]); err != nil {
			return nil, &sluice.Error{Op: "redisstore.ListAudit", Kind: sluice.KindInternal, Message: "unreadable audit entry", Err: err}
		}
	}
	return out, nil
}
