package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
)

var _ sluice.SessionStore = (*Store)(nil)

// Session items: pk "<tenant>#s#<id>", sk "s", with created (N, epoch ns),
// exp (N, epoch ns: the session's expiry, checked by every read and
// condition) and ttl (N, epoch s, a day after exp, for DynamoDB to reclaim
// the space, eventually). One partition per session, so that a tenant's
// sessions spread.
const (
	skSession   = "s"
	attrCreated = "created"
)

func sessionPK(tenant, id string) string { return tenant + "#s#" + id }

func nsAttr(t time.Time) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixNano(), 10)}
}

func decodeSession(tenant, id string, item map[string]types.AttributeValue) (sluice.Session, error) {
	x := sluice.Session{Tenant: tenant, ID: id}
	for attr, dst := range map[string]*time.Time{attrCreated: &x.CreatedAt, attrExpires: &x.ExpiresAt} {
		n, ok := item[attr].(*types.AttributeValueMemberN)
		if !ok {
			return x, sluice.ErrSessionNotFound
		}
		v, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return x, err
		}
		*dst = time.Unix(0, v).UTC()
	}
	return x, nil
}

// CreateSession implements sluice.SessionStore.
func (s *Store) CreateSession(ctx context.Context, x sluice.Session) error {
	item := key(sessionPK(x.Tenant, x.ID), skSession)
	item[attrCreated] = nsAttr(x.CreatedAt)
	item[attrExpires] = nsAttr(x.ExpiresAt)
	item[attrTTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(ttlOf(x.ExpiresAt.UnixNano()), 10)}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")})
	if conditionFailed(err, -1) {
		return sluice.ErrSessionExists
	}
	return unavailableIf("create session", err)
}

// GetSession implements sluice.SessionStore.
func (s *Store) GetSession(ctx context.Context, now time.Time, tenant, id string) (sluice.Session, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(sessionPK(tenant, id), skSession), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return sluice.Session{}, unavailable("get session", err)
	}
	if len(out.Item) == 0 {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	x, err := decodeSession(tenant, id, out.Item)
	if err != nil {
		return x, err
	}
	if !now.Before(x.ExpiresAt) {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	return x, nil
}

// TouchSession implements sluice.SessionStore: an update conditioned on the
// session existing and being live, so that a late touch can never re-create
// a deleted or expired session.
func (s *Store) TouchSession(ctx context.Context, now time.Time, tenant, id string, expiresAt time.Time) (sluice.Session, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(sessionPK(tenant, id), skSession),
		UpdateExpression:         aws.String("SET #exp = :exp, #ttl = :ttl"),
		ConditionExpression:      aws.String("attribute_exists(pk) AND #exp > :now AND #exp < :exp"),
		ExpressionAttributeNames: map[string]string{"#ttl": attrTTL, "#exp": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":exp": nsAttr(expiresAt), ":now": nsAttr(now),
			":ttl": &types.AttributeValueMemberN{Value: strconv.FormatInt(ttlOf(expiresAt.UnixNano()), 10)},
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var item map[string]types.AttributeValue
	switch {
	case err == nil:
		item = out.Attributes
	case conditionFailed(err, -1):
		// Gone, expired, or already later than expiresAt: which? The
		// failure says, with the item (ALL_OLD), unless the server left
		// it out: then a consistent read does. Never taken to mean
		// gone, which would end a live session.
		if item = conditionItem(err); len(item) == 0 {
			s.stats.emptyFailures.Add(1)
			got, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(sessionPK(tenant, id), skSession), ConsistentRead: aws.Bool(true)})
			if err != nil {
				return sluice.Session{}, unavailable("touch session", err)
			}
			if item = got.Item; len(item) == 0 {
				return sluice.Session{}, sluice.ErrSessionNotFound
			}
		}
	default:
		return sluice.Session{}, unavailable("touch session", err)
	}
	x, err := decodeSession(tenant, id, item)
	if err != nil {
		return x, err
	}
	if !now.Before(x.ExpiresAt) {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	return x, nil
}

// DeleteSession implements sluice.SessionStore.
func (s *Store) DeleteSession(ctx context.Context, now time.Time, tenant, id string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: key(sessionPK(tenant, id), skSession),
		ConditionExpression:       aws.String("attribute_exists(pk) AND #exp > :now"),
		ExpressionAttributeNames:  map[string]string{"#exp": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": nsAttr(now)},
	})
	if conditionFailed(err, -1) {
		return sluice.ErrSessionNotFound
	}
	return unavailableIf("delete session", err)
}

var _ sluice.Registry = (*Store)(nil)

// A node's registration of a session shares the session's partition: pk
// "<tenant>#s#<session>", sk "n#<node>", with node (S), exp (N, epoch ns)
// and ttl; a session's registrations are one Query.
const attrNode = "node"

// Register implements sluice.Registry.
func (s *Store) Register(ctx context.Context, r sluice.Registration) error {
	k := key(sessionPK(r.Tenant, r.Session), "n#"+r.Node)
	k[attrNode] = str(r.Node)
	k[attrExpires] = nsAttr(r.ExpiresAt)
	k[attrTTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(ttlOf(r.ExpiresAt.UnixNano()), 10)}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: k})
	return unavailableIf("register", err)
}

// Deregister implements sluice.Registry.
func (s *Store) Deregister(ctx context.Context, tenant, session, node string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: key(sessionPK(tenant, session), "n#"+node)})
	return unavailableIf("deregister", err)
}

// Registrations implements sluice.Registry.
func (s *Store) Registrations(ctx context.Context, now time.Time, tenant, session string) ([]sluice.Registration, error) {
	var out []sluice.Registration
	err := s.query(ctx, &dynamodb.QueryInput{
		TableName: &s.table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :p AND begins_with(sk, :n)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(sessionPK(tenant, session)), ":n": str("n#")},
	}, func(item map[string]types.AttributeValue) error {
		n, _ := item[attrNode].(*types.AttributeValueMemberS)
		e, _ := item[attrExpires].(*types.AttributeValueMemberN)
		if n == nil || e == nil {
			return nil
		}
		exp, err := strconv.ParseInt(e.Value, 10, 64)
		if err != nil {
			return err
		}
		if now.UnixNano() < exp {
			out = append(out, sluice.Registration{Tenant: tenant, Session: session, Node: n.Value, ExpiresAt: time.Unix(0, exp).UTC()})
		}
		return nil
	})
	return out, err
}
