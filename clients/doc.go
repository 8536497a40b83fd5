// Package clients holds the API's clients in other languages than Go (the
// Go client is client/httpapi): a TypeScript package (clients/typescript,
// npm name @makerfleet/client) and a Python package (clients/python,
// makerfleet). go generate writes the TypeScript types from the OpenAPI
// document (internal/tsgen); the package's tests check they are current and
// run both clients against a real fleet behind maker serve.
package clients

//go:generate go run ./internal/tsgen/gen -out typescript/src/openapi.ts
