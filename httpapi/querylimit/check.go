package querylimit

import (
	"context"
	"errors"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/talkgraph/talkgraph/graph"
	"github.com/talkgraph/talkgraph/service"
)

// Check measures a query's text against l: its size, its text (valid UTF-8, no escape of a
// lone surrogate), then its tokens while parsing, then the analysis of the document (see
// Analyze). A query the parser refuses for its syntax
// passes with a nil error, for the executor to report in its own words; so does the
// empty query (a persisted query's hash alone).
func Check(query string, l Limits) (Report, error) {
	if l.MaxBytes > 0 && len(query) > l.MaxBytes {
		return Report{}, service.Errorf(service.EINVALID, "query is too large: %d bytes, at most %d", len(query), l.MaxBytes)
	}
	if query == "" {
		return Report{}, nil
	}
	if err := checkText(query); err != nil {
		return Report{}, err
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: query}, l.MaxTokens)
	if err != nil {
		var gerr *gqlerror.Error
		if l.MaxTokens > 0 && errors.As(err, &gerr) && strings.HasPrefix(gerr.Message, "exceeded token limit") {
			return Report{}, service.Errorf(service.EINVALID, "query is too long: more than %d tokens", l.MaxTokens)
		}
		return Report{}, nil
	}
	return Analyze(doc, l)
}

// Checker is a gqlgen extension that checks every operation's query (see Check) before
// the executor parses and validates it, for every transport. Register it before
// extension.AutomaticPersistedQuery, so that a refused query never enters the persisted
// queries' cache either.
//
// Queries in Approved passed every check before and are not analysed again.
type Checker struct {
	Limits   Limits
	Approved *Cache
}

var (
	_ graphql.HandlerExtension          = Checker{}
	_ graphql.OperationParameterMutator = Checker{}
)

func (Checker) ExtensionName() string                   { return "QueryLimits" }
func (Checker) Validate(graphql.ExecutableSchema) error { return nil }

func (c Checker) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	if c.Approved != nil && c.Approved.Contains(params.Query) {
		return nil
	}
	if _, err := Check(params.Query, c.Limits); err != nil {
		return graph.Error(err)
	}
	return nil
}
