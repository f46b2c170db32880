package httpapi

import (
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// newTenancy returns the tenant layer a Handler's tests ask, over memory
// stores: o's, and new ones for those o leaves out.
func newTenancy(o tenancy.Options) *tenancy.Service {
	if o.Store == nil {
		o.Store = &memstore.Tenants{}
	}
	if o.Sessions == nil {
		o.Sessions = &memstore.Sessions{}
	}
	if o.Audit == nil {
		o.Audit = &memstore.Audit{}
	}
	return tenancy.New(o)
}
