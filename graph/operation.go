package graph

import (
	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// operation is what executing a subscription again needs of its operation context, kept
// by its Stream instead of the context (see Stream.execute): the parsed document and
// operation (shared with the query cache), the variables as a list (a map is made for each
// execution), the executor's middleware and recovery, and nothing that executing it added
// (the executor caches collected fields in the context). TestOperationCopiesEveryField
// says, for each field of graphql.OperationContext, whether it is carried or why not.
type operation struct {
	query, name string
	doc         *ast.QueryDocument
	def         *ast.OperationDefinition
	extensions  map[string]any
	vars        []variable
	noIntro     bool
	recover     graphql.RecoverFunc
	field       graphql.FieldMiddleware
	rootField   graphql.RootFieldMiddleware
}

type variable struct {
	name  string
	value any
}

// operationOf is the compact copy of rc.
func operationOf(rc *graphql.OperationContext) operation {
	op := operation{query: rc.RawQuery, name: rc.OperationName, doc: rc.Doc, def: rc.Operation,
		extensions: rc.Extensions, noIntro: rc.DisableIntrospection,
		recover: rc.RecoverFunc, field: rc.ResolverMiddleware, rootField: rc.RootResolverMiddleware}
	if len(rc.Variables) > 0 {
		op.vars = make([]variable, 0, len(rc.Variables))
		for k, v := range rc.Variables {
			op.vars = append(op.vars, variable{k, v})
		}
	}
	return op
}

// context makes a new operation context of op, to execute it again.
func (op *operation) context() *graphql.OperationContext {
	vars := make(map[string]any, len(op.vars))
	for _, v := range op.vars {
		vars[v.name] = v.value
	}
	return &graphql.OperationContext{
		RawQuery: op.query, Variables: vars, OperationName: op.name, Doc: op.doc,
		Extensions: op.extensions, Operation: op.def, DisableIntrospection: op.noIntro,
		RecoverFunc: op.recover, ResolverMiddleware: op.field, RootResolverMiddleware: op.rootField,
	}
}
