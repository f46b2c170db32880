package dynamostore

// TenantPolicy returns an IAM policy document that lets a role reach only
// tenant's items of the table: every partition key of a tenant's data leads
// with its id and '#', and dynamodb:LeadingKeys holds every request to keys
// that start so (seed 001's row isolation). Tenant ids cannot hold '#' or
// wildcards (sluice.ValidID), so no tenant's pattern matches another's keys.
//
// The policy covers what a node serving only that tenant does: its
// counters, tenant item, API keys, sessions and registrations (items and
// transactions, whose items IAM checks one by one as PutItem, UpdateItem,
// DeleteItem and ConditionCheckItem), and readiness (Store.Ping), which is
// a DescribeTable: it reads no item, so it needs no leading key.
//
// The nodes' partition ("#nodes": each node's runs, its heartbeat) is in
// the policy too, for PutItem and Query alone: a node serving one tenant
// is still a node of the cluster, and without its heartbeat it admits no
// WebSocket connection. The partition holds the nodes' URLs and liveness,
// no tenant's data.
//
// The table's indexes are in the policy under the same LeadingKeys
// condition: a Query of an index is held to index partitions that lead with
// the tenant's id. The one index today, gsi1, has none: its partitions
// ("tenants", "policy#<name>") list every tenant, for the admin API
// (ListTenants, ListOverrides), and stay out of a tenant's reach.
func TenantPolicy(tenant, tableARN string) map[string]any {
	return map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Sid":    "SluiceTenantRows",
			"Effect": "Allow",
			"Action": []string{
				"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
				"dynamodb:Query", "dynamodb:ConditionCheckItem",
			},
			"Resource": []string{tableARN, tableARN + "/index/*"},
			"Condition": map[string]any{
				"ForAllValues:StringLike": map[string]any{
					"dynamodb:LeadingKeys": []string{tenant + "#*"},
				},
			},
		}, {
			"Sid":      "SluiceNodes",
			"Effect":   "Allow",
			"Action":   []string{"dynamodb:PutItem", "dynamodb:Query"},
			"Resource": []string{tableARN},
			"Condition": map[string]any{
				"ForAllValues:StringEquals": map[string]any{
					"dynamodb:LeadingKeys": []string{nodesPK},
				},
			},
		}, {
			"Sid":      "SluiceReadiness",
			"Effect":   "Allow",
			"Action":   []string{"dynamodb:DescribeTable"},
			"Resource": []string{tableARN},
		}},
	}
}
