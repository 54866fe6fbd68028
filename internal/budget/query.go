package budget

import (
	"strings"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// ReportRequest is a usage report as people and programs ask for it, each
// field as text: the operator API's query parameters and the flags of
// talkide admin usage, checked here once for both. An error is a
// *contract.FieldError naming the field as the parameter is named (the
// flag without its "--").
type ReportRequest struct {
	By, From, To                           string
	User, Tenant, Env, Conversation, Model string
	Order                                  string
}

// Query checks r and returns the query it asks for, with the range
// relative to now. It leaves MaxRows to the caller, whose defaults differ.
func (r ReportRequest) Query(now time.Time) (ReportQuery, error) {
	var q ReportQuery
	var err error
	if r.By != "" {
		if q.By, err = ParseDimensions(r.By); err != nil {
			return q, err
		}
	}
	if q.From, q.To, err = ParseReportRange(r.From, r.To, now); err != nil {
		return q, err
	}
	for _, f := range []struct {
		name string
		v    string
		dst  *string
	}{{"user", r.User, &q.User}, {"tenant", r.Tenant, &q.Tenant}, {"env", r.Env, &q.Env}, {"conversation", r.Conversation, &q.Conversation}} {
		if f.v == "" {
			continue
		}
		if err := contract.ValidateID(f.name, f.v); err != nil {
			return q, err
		}
		*f.dst = f.v
	}
	if q.Env != "" && q.Tenant == "" {
		return q, contract.Invalid(ErrInvalidReport, "env", "needs tenant: an env is named within its tenant")
	}
	if r.Model != "" {
		if err := contract.ValidateModel("model", r.Model); err != nil {
			return q, err
		}
		q.Model = r.Model
	}
	switch o := ReportOrder(r.Order); o {
	case "", OrderCost, OrderKey:
		q.Order = o
	default:
		return q, contract.Invalid(ErrInvalidReport, "order", "%q is not an order: want cost or key", r.Order)
	}
	return q, nil
}

// ReportQueryFor returns a query of sub's usage: a user's across tenants,
// a tenant's, or a tenant-env's.
func ReportQueryFor(sub Subject) ReportQuery {
	var q ReportQuery
	switch sub.Scope {
	case ScopeUser:
		q.User = sub.ID
	case ScopeTenant:
		q.Tenant = sub.ID
	case ScopeEnv:
		q.Tenant, q.Env, _ = strings.Cut(sub.ID, "/")
	}
	return q
}
