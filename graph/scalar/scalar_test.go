package scalar_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/talkgraph/talkgraph/graph/scalar"
	"github.com/talkgraph/talkgraph/service"
)

// Int takes whole numbers of 32 bits, however the JSON writes them; Float takes finite
// numbers. Anything else is EINVALID, which the API answers as BAD_USER_INPUT.
func TestCoercion(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want int
		ok   bool
	}{
		{json.Number("5"), 5, true}, {json.Number("-2147483648"), math.MinInt32, true}, {json.Number("2147483647"), math.MaxInt32, true},
		{json.Number("1.0"), 1, true}, {json.Number("1e3"), 1000, true}, {int64(7), 7, true}, {float64(3), 3, true},
		{json.Number("2147483648"), 0, false}, {json.Number("-2147483649"), 0, false}, {json.Number("1e10"), 0, false},
		{json.Number("2.5"), 0, false}, {json.Number("1e999"), 0, false}, {int64(math.MaxInt64), 0, false},
		{"5", 0, false}, {true, 0, false}, {nil, 0, false}, {map[string]any{}, 0, false},
	} {
		got, err := scalar.UnmarshalInt(tc.in)
		if tc.ok && (err != nil || got != tc.want) || !tc.ok && service.ErrorCode(err) != service.EINVALID {
			t.Errorf("UnmarshalInt(%#v) = %d, %v", tc.in, got, err)
		}
	}
	for _, tc := range []struct {
		in   any
		want float64
		ok   bool
	}{
		{json.Number("0.5"), 0.5, true}, {json.Number("1"), 1, true}, {int64(2), 2, true}, {1.5, 1.5, true},
		{json.Number("1e999"), 0, false}, {math.NaN(), 0, false}, {math.Inf(1), 0, false},
		{"1", 0, false}, {false, 0, false}, {nil, 0, false},
	} {
		got, err := scalar.UnmarshalFloatContext(context.Background(), tc.in)
		if tc.ok && (err != nil || got != tc.want) || !tc.ok && service.ErrorCode(err) != service.EINVALID {
			t.Errorf("UnmarshalFloatContext(%#v) = %g, %v", tc.in, got, err)
		}
	}
}
