// Package pricetable stores the fleet's price table: one
// schemas.ModelPrice per model in the KV bucket maker_prices
// (bus.Namespace.PricesBucket) under "model.<bus.SafeKey(model)>", and the
// default record under "default".
//
// Only the operator writes it (maker prices set, PUT /v1/prices/{model};
// internal/auth: the admin and the api identity, never a coordinator,
// voter or tenant). Coordinators and maker serve keep it in memory through
// a watch (Cache), so a change applies within a second. What a table
// means (which record prices a sample, what a job may run) is
// internal/core/pricing's.
package pricetable
