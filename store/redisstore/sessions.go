package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

var (
	_ sluice.SessionStore = (*Store)(nil)
	_ sluice.Registry     = (*Store)(nil)
)

// A session is a hash under its tenant's tag, "s" + id: its creation (c)
// and expiry (e) instants, in nanoseconds, written as 20 digits so that
// the scripts compare them as strings (Lua's numbers are doubles, too
// short for nanoseconds). A session is live while e is after the caller's
// now; Redis drops the hash SessionSlack after its expiry by Redis's own
// clock, or SessionSlack after the write if that is later, a backstop for
// memory only. A session's registrations are a hash "r" + session id, of
// registrations (JSON) by node.

// sessionSlack is how long past a session's expiry Redis keeps it.
const sessionSlack = time.Hour

func nanos(t time.Time) string {
	ns := t.UnixNano()
	if ns < 0 {
		ns = 0
	}
	return fmt.Sprintf("%020d", ns)
}

// keepMs is the time to live of a record that is worth something until
// until: the backstop past it, from now by the wall clock.
func keepMs(until time.Time) int64 {
	return (max(time.Until(until), 0) + sessionSlack).Milliseconds()
}

var createSessionScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'c', ARGV[1], 'e', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// touchSessionScript moves a session live at ARGV[1] to expire at ARGV[2]
// if that is later, and answers its c and e; nil if none is live.
var touchSessionScript = redis.NewScript(`
local s = redis.call('HMGET', KEYS[1], 'c', 'e')
if not s[1] or s[2] <= ARGV[1] then return false end
if ARGV[2] > s[2] then
  redis.call('HSET', KEYS[1], 'e', ARGV[2])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
  s[2] = ARGV[2]
end
return s
`)

// deleteSessionScript deletes a session and answers 1 if it was live at
// ARGV[1].
var deleteSessionScript = redis.NewScript(`
local e = redis.call('HGET', KEYS[1], 'e')
if not e then return 0 end
redis.call('DEL', KEYS[1])
if e <= ARGV[1] then return 0 end
return 1
`)

func (s *Store) sessionKey(tenant, id string) string { return s.tenantKey(tenant, "s"+id) }

// CreateSession implements sluice.SessionStore.
func (s *Store) CreateSession(ctx context.Context, sess sluice.Session) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	n, err := createSessionScript.Run(ctx, s.c, []string{s.sessionKey(sess.Tenant, sess.ID)},
		nanos(sess.CreatedAt), nanos(sess.ExpiresAt), keepMs(sess.ExpiresAt)).Int()
	if err != nil {
		return errStore("CreateSession", err)
	}
	if n == 0 {
		return sluice.ErrSessionExists
	}
	return nil
}

func session(tenant, id, c, e string) (sluice.Session, error) {
	cn, err1 := strconv.ParseInt(c, 10, 64)
	en, err2 := strconv.ParseInt(e, 10, 64)
	if err1 != nil || err2 != nil {
		return sluice.Session{}, &sluice.Error{Op: "redisstore.session", Kind: sluice.KindInternal, Message: "unreadable session " + id}
	}
	return sluice.Session{Tenant: tenant, ID: id, CreatedAt: time.Unix(0, cn).UTC(), ExpiresAt: time.Unix(0, en).UTC()}, nil
}

// GetSession implements sluice.SessionStore.
func (s *Store) GetSession(ctx context.Context, now time.Time, tenant, id string) (sluice.Session, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return sluice.Session{}, err
	}
	defer cancel()
	v, err := s.c.HMGet(ctx, s.sessionKey(tenant, id), "c", "e").Result()
	if err != nil {
		return sluice.Session{}, errStore("GetSession", err)
	}
	c, _ := v[0].(string)
	e, _ := v[1].(string)
	if c == "" || e <= nanos(now) {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	return session(tenant, id, c, e)
}

// TouchSession implements sluice.SessionStore.
func (s *Store) TouchSession(ctx context.Context, now time.Time, tenant, id string, expiresAt time.Time) (sluice.Session, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return sluice.Session{}, err
	}
	defer cancel()
	v, err := touchSessionScript.Run(ctx, s.c, []string{s.sessionKey(tenant, id)}, nanos(now), nanos(expiresAt), keepMs(expiresAt)).StringSlice()
	if err == redis.Nil {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	if err != nil {
		return sluice.Session{}, errStore("TouchSession", err)
	}
	if len(v) != 2 {
		return sluice.Session{}, errStore("TouchSession", fmt.Errorf("script answered %d values", len(v)))
	}
	return session(tenant, id, v[0], v[1])
}

// DeleteSession implements sluice.SessionStore.
func (s *Store) DeleteSession(ctx context.Context, now time.Time, tenant, id string) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	n, err := deleteSessionScript.Run(ctx, s.c, []string{s.sessionKey(tenant, id)}, nanos(now)).Int()
	if err != nil {
		return errStore("DeleteSession", err)
	}
	if n == 0 {
		return sluice.ErrSessionNotFound
	}
	return nil
}

// registerScript sets field ARGV[1] of KEYS[1] to ARGV[2] and extends the
// hash's time to live to ARGV[3] ms if it is shorter.
var registerScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
`)

func (s *Store) registryKey(tenant, session string) string { return s.tenantKey(tenant, "r"+session) }

// Register implements sluice.Registry.
func (s *Store) Register(ctx context.Context, r sluice.Registration) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	j, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := registerScript.Run(ctx, s.c, []string{s.registryKey(r.Tenant, r.Session)}, r.Node, j, keepMs(r.ExpiresAt)).Err(); err != nil {
		return errStore("Register", err)
	}
	return nil
}

// Deregister implements sluice.Registry.
func (s *Store) Deregister(ctx context.Context, tenant, session, node string) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := s.c.HDel(ctx, s.registryKey(tenant, session), node).Err(); err != nil {
		return errStore("Deregister", err)
	}
	return nil
}

// Registrations implements sluice.Registry.
func (s *Store) Registrations(ctx context.Context, now time.Time, tenant, session string) ([]sluice.Registration, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	m, err := s.c.HGetAll(ctx, s.registryKey(tenant, session)).Result()
	if err != nil {
		return nil, errStore("Registrations", err)
	}
	var out []sluice.Registration
	for _, j := range m {
		var r sluice.Registration
		if err := json.Unmarshal([]byte(j), &r); err != nil {
			return nil, &sluice.Error{Op: "redisstore.Registrations", Kind: sluice.KindInternal, Message: "unreadable registration", Err: err}
		}
		if r.ExpiresAt.After(now) {
			out = append(out, r)
		}
	}
	return out, nil
}
