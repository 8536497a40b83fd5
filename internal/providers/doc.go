// Package providers is where the fleet's models are served: the provider
// registry and the router voters call models through.
//
// The registry holds one schemas.Deployment per place a model is served
// (a provider's endpoint, the name of the environment variable or file
// holding its key, its prices, its requests and tokens per minute, the
// calls a voter keeps in flight on it, whether it answers n > 1), in the
// KV bucket maker_providers, which only the operator writes (maker
// providers set) and voters read and watch; or in a file a voter is
// started with (ReadFile). A key itself is never in the registry.
//
// The Router is a voter's model: a sample request names a model (or none:
// the voter's own), and the router calls a deployment serving it. Each
// call is reserved against the deployment's fleet-wide limits first
// (internal/ratelimit, in Redis), and what the provider's reply says
// about its limits puts a hold on the deployment for every voter. A
// deployment whose call fails for its own reasons (it refuses the key or
// the model, it is down, it times out, it stays busy) is taken out for a
// while (a circuit breaker: 5s, doubling to 2 min while it keeps failing,
// then one trial call) and the call goes to the next deployment serving
// the model, so a job never notices one of its deployments going down.
// A request the model refuses for itself (400) or answers with nothing
// usable is not a deployment's fault and fails over nowhere.
package providers
