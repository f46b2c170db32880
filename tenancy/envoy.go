package tenancy

import "github.com/sluicehq/sluice"

// envoyPrefix begins the tenant of every Envoy domain: a name no tenant of
// the HTTP API can have (sluice.ValidID refuses ':'), so that Envoy's
// domains and the API's tenants never share counters.
const envoyPrefix = "envoy:"

// MaxEnvoyDomainLen is the longest Envoy domain whose tenant is a valid
// tenant name.
const MaxEnvoyDomainLen = sluice.MaxTenantLen - len(envoyPrefix)

// EnvoyTenant returns the tenant that counts an Envoy domain's requests
// (Envoy's rate limit service, package envoyrls). A domain has no record
// in the tenant store: its limits are its configuration directory's.
func EnvoyTenant(domain string) string { return envoyPrefix + domain }
