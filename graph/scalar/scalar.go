// Package scalar holds the marshalers of GraphQL's built-in Int and Float for the executor
// (gqlgen.yml maps the scalars here). Their input coercion is the GraphQL specification's,
// which gqlgen's own does not keep: a string is not a number ("1" is refused where a Float
// is expected), and an Int is a 32-bit integer. gqlparser's validation of variables lets
// both through, so these are where they are refused, with BAD_USER_INPUT. Output is written
// as gqlgen writes it.
package scalar

import (
	"context"
	"encoding/json"
	"math"
	"strconv"

	"github.com/99designs/gqlgen/graphql"

	"github.com/talkgraph/talkgraph/service"
)

// MarshalInt writes an Int as gqlgen does.
func MarshalInt(i int) graphql.Marshaler { return graphql.MarshalInt(i) }

// UnmarshalInt takes a whole number from -2^31 to 2^31-1: a JSON number or an integer
// literal. A number with a fraction, a string, a boolean are refused.
func UnmarshalInt(v any) (int, error) {
	var f float64
	switch v := v.(type) {
	case int:
		return int32Range(int64(v))
	case int32:
		return int(v), nil
	case int64:
		return int32Range(v)
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return int32Range(n)
		}
		var err error
		if f, err = strconv.ParseFloat(string(v), 64); err != nil {
			return 0, notA("Int", v)
		}
	case float64:
		f = v
	default:
		return 0, notA("Int", v)
	}
	// 1.0 and 1e3 are whole numbers, as in JavaScript's JSON.
	if f != math.Trunc(f) || math.IsInf(f, 0) {
		return 0, service.Errorf(service.EINVALID, "Int must be a whole number")
	}
	if f < math.MinInt32 || f > math.MaxInt32 {
		return 0, outOfRange()
	}
	return int(f), nil
}

func int32Range(n int64) (int, error) {
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, outOfRange()
	}
	return int(n), nil
}

func outOfRange() error {
	return service.Errorf(service.EINVALID, "Int must be between %d and %d (32 bits)", math.MinInt32, math.MaxInt32)
}

// MarshalFloatContext writes a Float as gqlgen does (NaN and infinities are an error).
func MarshalFloatContext(f float64) graphql.ContextMarshaler { return graphql.MarshalFloatContext(f) }

// UnmarshalFloatContext takes a finite number: a JSON number, or a float or integer
// literal. A string or a boolean is refused.
func UnmarshalFloatContext(_ context.Context, v any) (float64, error) {
	var f float64
	switch v := v.(type) {
	case float64:
		f = v
	case int:
		f = float64(v)
	case int32:
		f = float64(v)
	case int64:
		f = float64(v)
	case json.Number:
		var err error
		if f, err = strconv.ParseFloat(string(v), 64); err != nil {
			return 0, service.Errorf(service.EINVALID, "Float must be a finite number")
		}
	default:
		return 0, notA("Float", v)
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, service.Errorf(service.EINVALID, "Float must be a finite number")
	}
	return f, nil
}

// notA refuses a value of the wrong kind, naming its kind (never the value itself).
func notA(scalar string, v any) error {
	kind := "this value"
	switch v.(type) {
	case string:
		kind = "a string"
	case bool:
		kind = "a boolean"
	case json.Number:
		kind = "this number"
	case map[string]any:
		kind = "an object"
	case []any:
		kind = "a list"
	case nil:
		kind = "null"
	}
	return service.Errorf(service.EINVALID, "%s cannot represent %s", scalar, kind)
}
