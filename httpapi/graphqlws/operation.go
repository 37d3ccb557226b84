package graphqlws

import (
	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// operation is what executing a subscription again needs of its operation context: the
// parsed document and operation (shared with the query cache), the variables as a list
// (a map is made when it runs), and nothing that executing it added (the executor
// caches collected fields in the context).
type operation struct {
	query, name string
	doc         *ast.QueryDocument
	def         *ast.OperationDefinition
	extensions  map[string]any
	vars        []variable
	noIntro     bool
}

type variable struct {
	name  string
	value any
}

// opFuncs are the executor's middleware and recovery, the same for all of a connection's
// operations.
type opFuncs struct {
	recover   graphql.RecoverFunc
	field     graphql.FieldMiddleware
	rootField graphql.RootFieldMiddleware
}

func operationOf(rc *graphql.OperationContext) operation {
	op := operation{query: rc.RawQuery, name: rc.OperationName, doc: rc.Doc, def: rc.Operation,
		extensions: rc.Extensions, noIntro: rc.DisableIntrospection}
	if len(rc.Variables) > 0 {
		op.vars = make([]variable, 0, len(rc.Variables))
		for k, v := range rc.Variables {
			op.vars = append(op.vars, variable{k, v})
		}
	}
	return op
}

// context makes an operation context of op to execute, with the executor's funcs.
func (op *operation) context(fn *opFuncs) *graphql.OperationContext {
	vars := make(map[string]any, len(op.vars))
	for _, v := range op.vars {
		vars[v.name] = v.value
	}
	return &graphql.OperationContext{
		RawQuery: op.query, Variables: vars, OperationName: op.name, Doc: op.doc,
		Extensions: op.extensions, Operation: op.def, DisableIntrospection: op.noIntro,
		RecoverFunc: fn.recover, ResolverMiddleware: fn.field, RootResolverMiddleware: fn.rootField,
	}
}
