package sluice

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Tenant is a customer of the service Sluice protects. Its settings are the
// WebSocket gateway's limits (seed 001); its tier and overrides adjust the
// named policies of the configuration for it.
type Tenant struct {
	ID       string         `json:"id"`
	Tier     string         `json:"tier,omitempty"`
	Settings TenantSettings `json:"settings"`
	// Overrides adjust named policies for this tenant, on top of its
	// tier's, by policy name.
	Overrides map[string]PolicyOverride `json:"overrides,omitempty"`
	// Blocks are the operator's blocks of single keys (KeyBlock); ended
	// ones are dropped when the tenant is next written.
	Blocks    []KeyBlock `json:"blocks,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	// Version counts the record's writes: CreateTenant stores 1, and
	// UpdateTenant writes only over the version it is given, storing the
	// next, so that two writers of one tenant (on one node or on many)
	// never lose each other's change. Zero for a tenant of the
	// configuration file, which no store holds.
	Version int64 `json:"version,omitempty"`
	// File marks the record of a tenant of the configuration file, made
	// to hold its blocks and API keys: its tier, settings and overrides
	// are the file's, changed in the file, and its identity (since) is
	// the file's too.
	File bool `json:"file,omitempty"`
	// Epoch names the tenant's counters apart from those of an earlier
	// tenant of the same id, deleted since (Check.Epoch): set once, at
	// random, when the tenant is created. Zero for tenants
	// created before counters had epochs, whose counters keep the bare id
	// (so that an upgrade resets none of them), and for the file's.
	Epoch int64 `json:"epoch,omitempty"`
}

// KeyBlock is an operator's block of one key of a named policy: until
// Until, every request of the tenant that checks that policy for that key
// is denied, consuming nothing. Blocks live in the tenant's record, which
// a request reads anyway, so they cost no store call of their own and take
// effect on every node as a tenant change does.
type KeyBlock struct {
	Policy string    `json:"policy"`
	Key    string    `json:"key"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

// MaxBlocks bounds a tenant's live blocks, so that its record stays small
// (a DynamoDB item holds at most 400 KB).
const MaxBlocks = 200

// Blocked returns the end of the live block of key under policy, if any.
func (t *Tenant) Blocked(policy, key string, now time.Time) (time.Time, bool) {
	for i := range t.Blocks {
		if b := &t.Blocks[i]; b.Policy == policy && b.Key == key && now.Before(b.Until) {
			return b.Until, true
		}
	}
	return time.Time{}, false
}

// TenantSettings are a tenant's connection and message limits, as the AWS
// sample's tenant table holds them. Zero means the default of the
// configuration.
type TenantSettings struct {
	// ConnectionsPerSession caps the live connections of one session.
	ConnectionsPerSession int64 `json:"connectionsPerSession,omitempty"`
	// TenantConnections caps the tenant's live connections.
	TenantConnections int64 `json:"tenantConnections,omitempty"`
	// SessionPerMinute caps new connections per minute for one session.
	SessionPerMinute int64 `json:"sessionPerMinute,omitempty"`
	// TenantPerMinute caps the tenant's new connections per minute.
	TenantPerMinute int64 `json:"tenantPerMinute,omitempty"`
	// SessionTTL is how long, in seconds, a session lives without activity.
	SessionTTL int64 `json:"sessionTTL,omitempty"`
	// MessagesPerMinute caps the tenant's messages per minute.
	MessagesPerMinute int64 `json:"messagesPerMinute,omitempty"`
}

// PolicyOverride changes some fields of a named policy; nil fields keep the
// policy's value.
type PolicyOverride struct {
	Limit    *int64         `json:"limit,omitempty" yaml:"limit"`
	Window   *time.Duration `json:"window,omitempty" yaml:"window"`
	Burst    *int64         `json:"burst,omitempty" yaml:"burst"`
	LeaseTTL *time.Duration `json:"leaseTTL,omitempty" yaml:"leaseTTL"`
	Shadow   *bool          `json:"shadow,omitempty" yaml:"shadow"`
}

// Apply returns p with the override's fields set.
func (o PolicyOverride) Apply(p Policy) Policy {
	if o.Limit != nil {
		p.Limit = *o.Limit
	}
	if o.Window != nil {
		p.Window = *o.Window
	}
	if o.Burst != nil {
		p.Burst = *o.Burst
	}
	if o.LeaseTTL != nil {
		p.LeaseTTL = *o.LeaseTTL
	}
	if o.Shadow != nil {
		p.Shadow = *o.Shadow
	}
	return p
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidID reports whether id is a valid tenant id: 1 to 128 letters, digits,
// '.', '_' or '-', starting with a letter or digit. Ids appear in URLs, keys
// and DynamoDB partition keys, so they are kept plain.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// Validate reports the first invalid field of t.
func (t *Tenant) Validate() error {
	if !ValidID(t.ID) {
		return Invalid("id", "must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	s := t.Settings
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"settings.connectionsPerSession", s.ConnectionsPerSession},
		{"settings.tenantConnections", s.TenantConnections},
		{"settings.sessionPerMinute", s.SessionPerMinute},
		{"settings.tenantPerMinute", s.TenantPerMinute},
		{"settings.sessionTTL", s.SessionTTL},
		{"settings.messagesPerMinute", s.MessagesPerMinute},
	} {
		if f.v < 0 || f.v > MaxLimit {
			return Invalid(f.name, "must be between 0 (the default) and %d, got %d", MaxLimit, f.v)
		}
	}
	if len(t.Blocks) > MaxBlocks {
		return Invalid("blocks", "at most %d live blocks per tenant, got %d: lift some first", MaxBlocks, len(t.Blocks))
	}
	for i, b := range t.Blocks {
		switch {
		case !ValidPolicyName(b.Policy):
			return Invalid(fmt.Sprintf("blocks[%d].policy", i), "must name a policy, got %q", b.Policy)
		case len(b.Key) > MaxKeyLen:
			return Invalid(fmt.Sprintf("blocks[%d].key", i), "is at most %d bytes", MaxKeyLen)
		case len(b.Reason) > 256 || len(b.By) > 128:
			return Invalid(fmt.Sprintf("blocks[%d].reason", i), "is at most 256 bytes, and by at most 128")
		}
	}
	for name, o := range t.Overrides {
		if o.Limit != nil && (*o.Limit <= 0 || *o.Limit > MaxLimit) {
			return Invalid("overrides."+name+".limit", "must be between 1 and %d", MaxLimit)
		}
		if o.Window != nil && (*o.Window < MinWindow || *o.Window > MaxWindow) {
			return Invalid("overrides."+name+".window", "must be between %v and %v", MinWindow, MaxWindow)
		}
		if o.Burst != nil && (*o.Burst < 1 || *o.Burst > MaxLimit) {
			// Zero would silently mean "burst = limit": omit it for that.
			return Invalid("overrides."+name+".burst", "must be between 1 and %d (omit it for a burst equal to the limit)", MaxLimit)
		}
		if o.LeaseTTL != nil && (*o.LeaseTTL < MinWindow || *o.LeaseTTL > MaxWindow) {
			return Invalid("overrides."+name+".leaseTTL", "must be between %v and %v", MinWindow, MaxWindow)
		}
	}
	return nil
}

// APIKey is a tenant's credential. The secret is shown once, when the key
// is created; the store keeps only its SHA-256 hash.
type APIKey struct {
	// ID is the key's public part, also the prefix of the token.
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Hash      []byte    `json:"-"`
	CreatedAt time.Time `json:"createdAt"`
}

// AuditEntry is one change to a tenant's limits or keys: who made it, when,
// and the record before and after (JSON, null for none).
type AuditEntry struct {
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Tenant string          `json:"tenant"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// AuditLog keeps the trail of changes, per tenant, outliving the tenant.
// Implementations: memstore (the last MaxAuditInMemory per tenant),
// pebblestore and dynamostore (every entry). Every one passes
// storetest.RunAudit.
type AuditLog interface {
	// AppendAudit adds e to its tenant's trail.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns tenant's n newest entries, newest first.
	ListAudit(ctx context.Context, tenant string, n int) ([]AuditEntry, error)
}

// Errors of a TenantStore.
var (
	ErrTenantNotFound = &Error{Kind: KindNotFound, Message: "tenant not found"}
	ErrTenantExists   = &Error{Kind: KindConflict, Message: "tenant already exists"}
	ErrKeyNotFound    = &Error{Kind: KindNotFound, Message: "API key not found"}
	// ErrTenantChanged answers an UpdateTenant whose version is not the
	// stored one: the tenant changed since it was read. Read it again,
	// change it again, and write it again.
	ErrTenantChanged = &Error{Kind: KindConflict, Message: "tenant changed since it was read"}
)

// TenantStore keeps tenants and their API keys. Implementations: memstore
// (in process), pebblestore (durable), and later DynamoDB. Every
// implementation passes storetest.RunTenants.
type TenantStore interface {
	// CreateTenant adds t, at version 1 whatever t.Version;
	// ErrTenantExists if its id is taken.
	CreateTenant(ctx context.Context, t Tenant) error
	// UpdateTenant replaces the tenant if its stored version is
	// t.Version, storing it at t.Version+1: ErrTenantChanged if the
	// stored version is another, ErrTenantNotFound if there is none.
	UpdateTenant(ctx context.Context, t Tenant) error
	// GetTenant returns the tenant; ErrTenantNotFound if none.
	GetTenant(ctx context.Context, id string) (Tenant, error)
	// ListTenants returns every tenant, by id.
	ListTenants(ctx context.Context) ([]Tenant, error)
	// DeleteTenant removes the tenant and its API keys;
	// ErrTenantNotFound if none.
	DeleteTenant(ctx context.Context, id string) error

	// PutAPIKey stores k; its tenant must exist.
	PutAPIKey(ctx context.Context, k APIKey) error
	// GetAPIKey returns the tenant's key with that id; ErrKeyNotFound if
	// none. A key is found by its tenant, so that every lookup stays within
	// one tenant's data (see docs/dynamodb.md).
	GetAPIKey(ctx context.Context, tenant, id string) (APIKey, error)
	// ListAPIKeys returns a tenant's keys, by id.
	ListAPIKeys(ctx context.Context, tenant string) ([]APIKey, error)
	// DeleteAPIKey removes a tenant's key; ErrKeyNotFound if the tenant
	// has no key of that id.
	DeleteAPIKey(ctx context.Context, tenant, id string) error
}

// SecretStore keeps secrets that every node sharing a store must agree on,
// such as the key that signs a tenant's lease tokens, so that a token made
// by one node is good on another and after a restart. Implementations:
// memstore.Tenants, pebblestore, dynamostore.
type SecretStore interface {
	// Secret returns tenant's secret named name: 32 random bytes made on
	// first use, the same for every caller from then on. The tenant leads
	// its key, as every tenant's data does (docs/dynamodb.md).
	Secret(ctx context.Context, tenant, name string) ([]byte, error)
}

// SecretLen is the length of a secret.
const SecretLen = 32
