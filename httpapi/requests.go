package httpapi

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// The plain HTTP transports (POST with application/json, GET) answer as the
// GraphQL-over-HTTP specification asks, which gqlgen's own do not on two points: a
// query that does not parse or validate (its variables included) is answered 200 under
// application/json, where gqlgen answers 422; and under application/graphql-response+json
// such a request error is answered 400 without a data entry, where gqlgen writes
// "data": null. They check a request before decoding it (graph.CheckRequest): gqlgen's
// decoder takes text that is not valid UTF-8 as U+FFFD, and answers a body that does not
// decode with an error that repeats the whole body.

// Response media types (the request's Accept chooses, see responseType).
const (
	mediaJSON            = "application/json"
	mediaGraphQLResponse = "application/graphql-response+json"
)

// postJSON is the transport of POST /query with a JSON body.
type postJSON struct{}

var _ graphql.Transport = postJSON{}

func (postJSON) Supports(r *http.Request) bool {
	if r.Method != http.MethodPost || r.Header.Get("Upgrade") != "" {
		return false
	}
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mediaType == mediaJSON
}

func (postJSON) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	start := graphql.Now()
	media := responseType(r)
	body, err := io.ReadAll(r.Body) // read already, within its limits (see bodies)
	if err != nil {
		refuseRequest(w, r, exec, media, service.Errorf(service.EINVALID, "the body could not be read: %v", err))
		return
	}
	params := &graphql.RawParams{}
	if err := graph.DecodeRequest(body, params); err != nil {
		refuseRequest(w, r, exec, media, err)
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	answer(w, r, exec, params, media, false)
}

// getQuery is the transport of GET /query, for queries only: the request's members are
// the URL's parameters, variables and extensions as JSON. It checks them first: query and
// operationName valid UTF-8, variables and extensions JSON objects of valid text (see
// graph.CheckJSONObject).
type getQuery struct{}

var _ graphql.Transport = getQuery{}

func (getQuery) Supports(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("Upgrade") == ""
}

func (getQuery) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	start := graphql.Now()
	media := responseType(r)
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		refuseRequest(w, r, exec, media, service.Errorf(service.EINVALID, "the URL's query string is not valid: %v", err))
		return
	}
	params := &graphql.RawParams{Query: q.Get("query"), OperationName: q.Get("operationName"), Headers: r.Header}
	for _, name := range []string{"query", "operationName"} {
		if !utf8.ValidString(q.Get(name)) {
			refuseRequest(w, r, exec, media, service.Errorf(service.EINVALID, "text in %s is not valid UTF-8", name))
			return
		}
	}
	for _, m := range []struct {
		name string
		into *map[string]any
	}{{"variables", &params.Variables}, {"extensions", &params.Extensions}} {
		name, v := m.name, q.Get(m.name)
		if v == "" {
			continue
		}
		if err := graph.CheckJSONObject(name, []byte(v)); err != nil {
			refuseRequest(w, r, exec, media, err)
			return
		}
		dec := json.NewDecoder(strings.NewReader(v))
		dec.UseNumber()
		if err := dec.Decode(m.into); err != nil {
			// CheckJSONObject let through nothing the decoder refuses; should it, say so plainly.
			refuseRequest(w, r, exec, media, service.Errorf(service.EINVALID, "%s is not a JSON object", name))
			return
		}
	}
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	answer(w, r, exec, params, media, true)
}

// answer runs the operation params holds and writes its response as media; with
// queriesOnly (GET) it refuses any other operation with 406. A request without a query
// (nor a persisted query's hash) is refused with 400: it is not a GraphQL request. A
// request error (the query does not parse or validate, its variables included) is
// answered 200 under application/json and 400 under application/graphql-response+json,
// then without a data entry, as the GraphQL-over-HTTP specification asks. Any other
// refusal before the operation runs (a limit, the introspection gate, a subscription
// here) is 200, as are the operation's own errors.
func answer(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor, params *graphql.RawParams, media string, queriesOnly bool) {
	ctx := r.Context()
	if params.Query == "" && params.Extensions["persistedQuery"] == nil {
		refuseRequest(w, r, exec, media, service.Errorf(service.EINVALID, "the request has no query"))
		return
	}
	rc, errs := exec.CreateOperationContext(ctx, params)
	if errs != nil {
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)
		if media == mediaGraphQLResponse && errcode.GetErrorKind(errs) == errcode.KindProtocol {
			writeResponse(w, http.StatusBadRequest, media, withoutData(resp))
			return
		}
		writeResponse(w, http.StatusOK, media, resp)
		return
	}
	if queriesOnly && rc.Operation.Operation != ast.Query {
		writeResponse(w, http.StatusNotAcceptable, media, requestError{Errors: gqlerror.List{{Message: "GET requests only allow query operations"}}})
		return
	}
	responses, ctx := exec.DispatchOperation(ctx, rc)
	writeResponse(w, http.StatusOK, media, responses(ctx))
}

// responseType is the media type of the answer to r, from its Accept header as gqlgen
// chooses it: the first of application/json and application/graphql-response+json it
// lists; application/json when it lists neither but accepts anything (*/*,
// application/*), or when there is no Accept; application/graphql-response+json when it
// names only other types.
func responseType(r *http.Request) string {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return mediaJSON
	}
	for part := range strings.SplitSeq(accept, ",") {
		mediaType, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case "*/*", "application/*", mediaJSON:
			return mediaJSON
		case mediaGraphQLResponse:
			return mediaGraphQLResponse
		}
	}
	return mediaGraphQLResponse
}

// refuseRequest answers a request refused before it reached GraphQL: 400 with a GraphQL
// response of one error, BAD_USER_INPUT (or err's code); under
// application/graphql-response+json without a data entry.
func refuseRequest(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor, media string, err error) {
	resp := exec.DispatchError(r.Context(), gqlerror.List{graph.Error(err)})
	if media == mediaGraphQLResponse {
		writeResponse(w, http.StatusBadRequest, media, withoutData(resp))
		return
	}
	writeResponse(w, http.StatusBadRequest, media, resp)
}

// requestError is a GraphQL response to a request error: errors, and no data entry.
type requestError struct {
	Errors     gqlerror.List  `json:"errors"`
	Extensions map[string]any `json:"extensions,omitempty"`
}

// withoutData is resp without its data entry, for a request error.
func withoutData(resp *graphql.Response) requestError {
	return requestError{Errors: resp.Errors, Extensions: resp.Extensions}
}

// writeResponse writes v, a GraphQL response, as JSON with status and the content type media.
func writeResponse(w http.ResponseWriter, status int, media string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}`)
	}
	w.Header().Set("Content-Type", media)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
