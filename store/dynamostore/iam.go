package dynamostore

// TenantPolicy returns an IAM policy document that lets a role reach only
// tenant's items of the table: every partition key of a tenant's data leads
// with its id and '#', and dynamodb:LeadingKeys holds every request to keys
// that start so (seed 001's row isolation). Tenant ids cannot hold '#' or
// wildcards (sluice.ValidID), so no tenant's pattern matches another's keys.
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
			"Resource": []string{tableARN},
			"Condition": map[string]any{
				"ForAllValues:StringLike": map[string]any{
					"dynamodb:LeadingKeys": []string{tenant + "#*"},
				},
			},
		}},
	}
}
