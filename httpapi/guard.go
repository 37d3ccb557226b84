package httpapi

import (
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"

	"github.com/talkgraph/talkgraph/httpapi/querylimit"
)

// fillLimits sets the defaults of the limits on queries and clients (see docs/OPERATIONS.md,
// Security, for why these values).
func (c *HandlerConfig) fillLimits(d HandlerConfig) {
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pickRate := func(v *float64, def float64) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&c.MaxQueryBytes, d.MaxQueryBytes)
	pick(&c.MaxQueryTokens, d.MaxQueryTokens)
	pick(&c.MaxAliases, d.MaxAliases)
	pick(&c.MaxErrors, d.MaxErrors)
	pick(&c.SubscribeBurst, d.SubscribeBurst)
	pick(&c.AnonBurst, d.AnonBurst)
	pick(&c.GuestBurst, d.GuestBurst)
	pickRate(&c.SubscribePerSecond, d.SubscribePerSecond)
	pickRate(&c.AnonPerSecond, d.AnonPerSecond)
	pickRate(&c.GuestPerMinute, d.GuestPerMinute)
	pickRate(&c.SharedReadsPerSecond, d.SharedReadsPerSecond)
	pick(&c.SharedReadsBurst, d.SharedReadsBurst)
	if c.DisableIntrospection {
		c.Introspection = IntrospectionOff
	}
	if c.Introspection == "" {
		c.Introspection = d.Introspection
	}
}

// useLimits installs on gql the checks every operation goes through, whatever its
// transport, and the query cache.
// It returns the per-user limiters, for Server.Sweep.
func useLimits(gql *handler.Server, cfg HandlerConfig) []*keyedLimiter {
	// Every document is measured before it is parsed for the executor and validated (see
	// querylimit); only those that pass every check below enter the query cache (bounded
	// by its bytes too), and persisted queries are only kept once measured.
	limits := querylimit.Defaults
	limits.MaxBytes, limits.MaxTokens = cfg.MaxQueryBytes, cfg.MaxQueryTokens
	limits.MaxCost, limits.MaxDepth, limits.MaxAliases = cfg.MaxComplexity, cfg.MaxDepth, cfg.MaxAliases
	queries := querylimit.NewCache(1000, 4<<20)
	gql.SetQueryCache(queries)
	gql.SetParserTokenLimit(cfg.MaxQueryTokens)
	// Suggestions ("Did you mean …?") name fields: not to anyone who may not introspect.
	gql.SetDisableSuggestion(cfg.Introspection != IntrospectionOn)
	gql.Use(querylimit.Checker{Limits: limits, Approved: queries})
	gql.Use(extension.AutomaticPersistedQuery{Cache: querylimit.NewLRU[string](1000, 4<<20, func(k, v string) int { return len(k) + len(v) })})
	gql.Use(introspectionGate{mode: cfg.Introspection})
	gql.Use(subscriptionTransport{})
	ops := operationLimits{
		rate:      newKeyedLimiter(cfg.OpsPerSecond, cfg.OpsBurst),
		subscribe: newKeyedLimiter(cfg.SubscribePerSecond, cfg.SubscribeBurst),
		anonymous: newKeyedLimiter(cfg.SharedReadsPerSecond, cfg.SharedReadsBurst),
	}
	gql.Use(ops)
	gql.Use(queries.Commit()) // last: after every check that can refuse
	gql.AroundResponses(capErrors(cfg.MaxErrors))
	return []*keyedLimiter{ops.rate, ops.subscribe, ops.anonymous}
}
