package graph

import (
	"reflect"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
)

// notCopied are the fields of graphql.OperationContext that the compact copy of an
// operation (operation) leaves out on purpose, each with the reason. Every other field
// must come through operationOf and context unchanged.
var notCopied = map[string]string{
	"Headers": "the request's headers (server-sent events pass them; websockets leave them out): " +
		"kept with every subscription they would cost more than the rest of it. Only the tracing " +
		"extension reads them, for a span, and it makes none for an execution again (see Resumed)",
	"Stats": "the first execution's timings (read, parse, validation) and what extensions noted of it, " +
		"for tracing extensions, which leave an execution again alone: it is not a new operation",
	"collectFieldsCache": "what executing the operation added, the fields it collected: an execution " +
		"again collects them anew, and dropping them is the point of the copy",
}

// TestOperationCopiesEveryField fills every field of a graphql.OperationContext, makes the
// context that executing the operation again runs with (operationOf, then context), and
// wants each field back unchanged, unless notCopied says why not. A field gqlgen adds to
// OperationContext fails the test until it is copied or listed.
func TestOperationCopiesEveryField(t *testing.T) {
	var rc graphql.OperationContext
	v := reflect.ValueOf(&rc).Elem()
	typ := v.Type()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue // cannot be copied from outside gqlgen: it must be in notCopied
		}
		v.Field(i).Set(nonZero(t, f.Type, f.Name))
	}
	op := operationOf(&rc)
	again := reflect.ValueOf(op.context()).Elem()
	for i := range typ.NumField() {
		f := typ.Field(i)
		reason, omitted := notCopied[f.Name]
		copied := f.IsExported() && same(v.Field(i), again.Field(i))
		switch {
		case copied && omitted:
			t.Errorf("OperationContext.%s is copied, but notCopied says it is not (%s)", f.Name, reason)
		case !copied && !omitted:
			t.Errorf("OperationContext.%s is not copied by operationOf and context: copy it, or say in notCopied why not", f.Name)
		}
	}
	for name := range notCopied {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("notCopied lists %s, which OperationContext does not have", name)
		}
	}
}

// same reports whether a and b are the same value: deeply equal, or the same function.
func same(a, b reflect.Value) bool {
	if a.Kind() == reflect.Func {
		return a.Pointer() == b.Pointer()
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// nonZero makes a value of type typ that is not the zero value, for the field name.
func nonZero(t *testing.T, typ reflect.Type, name string) reflect.Value {
	t.Helper()
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.String:
		v.SetString("value of " + name)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(7)
	case reflect.Interface:
		v.Set(reflect.ValueOf("value of " + name))
	case reflect.Pointer:
		v.Set(reflect.New(typ.Elem()))
	case reflect.Slice:
		v.Set(reflect.Append(v, nonZero(t, typ.Elem(), name)))
	case reflect.Map:
		v.Set(reflect.MakeMap(typ))
		v.SetMapIndex(nonZero(t, typ.Key(), name), nonZero(t, typ.Elem(), name))
	case reflect.Chan:
		v.Set(reflect.MakeChan(typ, 0))
	case reflect.Func:
		v.Set(reflect.MakeFunc(typ, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, typ.NumOut())
			for i := range out {
				out[i] = reflect.Zero(typ.Out(i))
			}
			return out
		}))
	case reflect.Struct:
		if typ == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1, 0)))
			break
		}
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() {
				v.Field(i).Set(nonZero(t, f.Type, name+"."+f.Name))
			}
		}
	}
	if v.IsZero() {
		t.Fatalf("the test cannot fill %s, a %s", name, typ)
	}
	return v
}
