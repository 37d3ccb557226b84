package graph

import (
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"

	"github.com/talkgraph/talkgraph/service"
)

// CheckRequest takes GraphQL requests as clients send them, and refuses the others with a
// message that says what is wrong and where, never quoting more than a character or two of
// the request.
func TestCheckRequest(t *testing.T) {
	long := strings.Repeat("x", 900_000)
	for _, tc := range []struct{ body, want string }{
		{`{"query":"{ viewer { id } }"}`, ""},
		{` {"query":"q","variables":null,"operationName":null,"extensions":{"a":[1,2.5,"\ud83d\ude00"]}} ` + "\n", ""},
		{`{"Query":"q","VARIABLES":{"c":"é \u00e9 \uD83D\uDE00"},"headers":{"A":["b"],"C":null}}`, ""},
		{`{"query":"q","unknown":[1,{"x":"\ud800"}]}`, "text in unknown.1.x holds a lone UTF-16 surrogate (\\ud800)"},
		{"{\"query\":\"q\",\"variables\":{\"c\":\"ab\xff\xfecd\"}}", "text in variables.c is not valid UTF-8"},
		{"{\"query\":\"q\xc3\"}", "text in query is not valid UTF-8"},
		{`{"query":"q","variables":{"c":"\ud800"}}`, "text in variables.c holds a lone UTF-16 surrogate (\\ud800), which is not a character"},
		{`{"query":"q","variables":{"c":"a\udc00b"}}`, "(\\udc00)"},
		{`{"query":"q","variables":{"c":"\ud800\u0041"}}`, "(\\ud800)"},
		{`{"query":"q","variables":{"in":{"list":["ok","\uDBFF"]}}}`, "text in variables.in.list.1 holds a lone UTF-16 surrogate (\\uDBFF)"},
		{"{\"query\":\"q\",\"variables\":{\"c\xff\":1}}", "text in variables is not valid UTF-8"},
		{"{\"" + long + "\":{\"c\":\"\xff\"}}", "is not valid UTF-8"},
		{"not JSON " + long, "the request is not JSON: invalid character 'o' in literal null (expecting 'u') (at byte 1)"},
		{`{"query":"q"`, "the request is not JSON: it ends too soon"},
		{``, "the request is not JSON: it ends too soon"},
		{`{"query":"q"} {}`, "the request holds more than one JSON value"},
		{`{"query":"q"} x`, "the request is not JSON"},
		{`[{"query":"q"}]`, "the request must be a JSON object with a query"},
		{`{"query":5}`, "query must be a string"},
		{`{"operationName":{}}`, "operationName must be a string"},
		{`{"query":"q","variables":"x"}`, "variables must be an object"},
		{`{"query":"q","extensions":[]}`, "extensions must be an object"},
		{`{"query":"q","headers":{"a":5}}`, "headers must be an object of lists of strings"},
		{`{"query":"q","headers":{"a":[5]}}`, "headers must be an object of lists of strings"},
		{`{"query":"q","headers":[]}`, "headers must be an object of lists of strings"},
	} {
		err := CheckRequest([]byte(tc.body))
		name := tc.body[:min(len(tc.body), 60)]
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", name, err)
			}
			continue
		}
		msg := service.ErrorMessage(err)
		if service.ErrorCode(err) != service.EINVALID || !strings.Contains(msg, tc.want) {
			t.Errorf("%q: %v, want EINVALID saying %q", name, err, tc.want)
		}
		if len(msg) > 300 {
			t.Errorf("%q: a message of %d bytes", name, len(msg))
		}
		// What CheckRequest passes, Go's decoder takes: no error of its can repeat the input.
		if err == nil {
			if derr := DecodeRequest([]byte(tc.body), &graphql.RawParams{}); derr != nil {
				t.Errorf("%q: DecodeRequest: %v", name, derr)
			}
		}
	}
}

func TestCheckJSONObject(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"a":1}`, ""}, {`null`, ""},
		{`[1]`, "variables must be a JSON object"},
		{`{"a":"\ud800"}`, "text in variables.a holds a lone UTF-16 surrogate"},
		{"{\"a\":\"\xff\"}", "text in variables.a is not valid UTF-8"},
		{`{"a":`, "variables is not JSON: it ends too soon"},
		{`{} {}`, "variables holds more than one JSON value"},
	} {
		err := CheckJSONObject("variables", []byte(tc.raw))
		if tc.want == "" && err != nil || tc.want != "" && !strings.Contains(service.ErrorMessage(err), tc.want) {
			t.Errorf("%q: %v, want %q", tc.raw, err, tc.want)
		}
	}
}
