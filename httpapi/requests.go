package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// checkedPOST is gqlgen's POST transport with the request checked first (graph.CheckRequest):
// gqlgen's decoder takes text that is not valid UTF-8 as U+FFFD, and answers a body that
// does not decode with an error that repeats the whole body. Such a request gets 400 with
// BAD_USER_INPUT saying what is wrong and where.
type checkedPOST struct{ graphql.Transport }

func (p checkedPOST) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// A body that cannot be read (over MAX_BODY_BYTES) is gqlgen's to answer, as before.
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), failingReader{err}))
		p.Transport.Do(w, r, exec)
		return
	}
	if err := graph.CheckRequest(body); err != nil {
		refuseRequest(w, r, exec, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.Transport.Do(w, r, exec)
}

// checkedGET is gqlgen's GET transport with the URL's parameters checked first: query and
// operationName valid UTF-8, variables and extensions JSON objects of valid text (see
// graph.CheckJSONObject). gqlgen would take the text as U+FFFD, or answer without a code.
type checkedGET struct{ graphql.Transport }

func (g checkedGET) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		refuseRequest(w, r, exec, service.Errorf(service.EINVALID, "the URL's query string is not valid: %v", err))
		return
	}
	for _, name := range []string{"query", "operationName"} {
		if !utf8.ValidString(q.Get(name)) {
			refuseRequest(w, r, exec, service.Errorf(service.EINVALID, "text in %s is not valid UTF-8", name))
			return
		}
	}
	for _, name := range []string{"variables", "extensions"} {
		if v := q.Get(name); v != "" {
			if err := graph.CheckJSONObject(name, []byte(v)); err != nil {
				refuseRequest(w, r, exec, err)
				return
			}
		}
	}
	g.Transport.Do(w, r, exec)
}

// refuseRequest answers a request refused before it reached GraphQL: 400 with a GraphQL
// response of one error, BAD_USER_INPUT (or err's code).
func refuseRequest(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(exec.DispatchError(r.Context(), gqlerror.List{graph.Error(err)}))
}

// failingReader fails every read with err.
type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }
