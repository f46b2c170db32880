package redisstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/peer"
)

var _ peer.Store = (*Store)(nil)

// The nodes of a cluster: a hash "nodes" after the prefix, outside every
// tenant's tag, of one field per run of a node ("<node URL>#<tag>") holding
// its heartbeat (JSON). A run's field stays NodesKept past its until, so
// that the other nodes know its tag as a dead one's for as long as its
// leases may live; Heartbeats drops those past that.

// NodesKept is how long a run's heartbeat stays past its until.
const NodesKept = 24 * time.Hour

func (s *Store) nodesKey() string { return s.opts.Prefix + "nodes" }

// Announce records h.
func (s *Store) Announce(ctx context.Context, h sluice.Heartbeat) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	j, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := s.c.HSet(ctx, s.nodesKey(), h.Node+"#"+strconv.Itoa(int(h.Tag)), j).Err(); err != nil {
		return errStore("Announce", err)
	}
	return nil
}

// Heartbeats returns every run of a node recorded, live or not, and drops
// those kept long enough.
func (s *Store) Heartbeats(ctx context.Context) ([]sluice.Heartbeat, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	m, err := s.c.HGetAll(ctx, s.nodesKey()).Result()
	if err != nil {
		return nil, errStore("Heartbeats", err)
	}
	var out []sluice.Heartbeat
	var old []string
	for f, j := range m {
		var h sluice.Heartbeat
		if err := json.Unmarshal([]byte(j), &h); err != nil {
			old = append(old, f) // unreadable: a run no one can use
			continue
		}
		if time.Since(h.Until) > NodesKept {
			old = append(old, f)
			continue
		}
		out = append(out, h)
	}
	if len(old) > 0 {
		if err := s.c.HDel(ctx, s.nodesKey(), old...).Err(); err != nil {
			return nil, errStore("Heartbeats", err)
		}
	}
	return out, nil
}
