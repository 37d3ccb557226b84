package service

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer writes the validator's messages, in English.
var printer = message.NewPrinter(language.English)

// This file checks JSON against a JSON Schema (an answer against a question's
// answerSchema, a tool call's arguments against the tool's input schema), with
// github.com/santhosh-tekuri/jsonschema: a well-kept validator of every draft. Agents that
// check a model's arguments before a tool runs (the openai agent's MCP tools) use the same
// rule, so that a model and a user editing arguments are told the same.

// JSONSchema is a compiled JSON Schema. It is safe for concurrent use.
type JSONSchema struct{ sch *jsonschema.Schema }

// schemaURL is where a schema given as text is said to live: it names nothing real, and
// references outside the schema are refused (noLoader), so a schema can read no file
// and reach no server.
const schemaURL = "talkgraph:schema.json"

// noLoader refuses every reference a schema makes outside itself.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a schema may not refer outside itself (%s)", url)
}

// CompileSchema compiles text, a JSON Schema; the error says what is wrong with it. A
// schema may not refer to anything outside itself: it reads no file and reaches no server.
func CompileSchema(text string) (*JSONSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("the schema is not valid: %v", err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("the schema is not valid: %s", strings.ReplaceAll(err.Error(), schemaURL, "the schema"))
	}
	return &JSONSchema{sch}, nil
}

// Validate checks that text is JSON that satisfies the schema. The error names the first
// place that does not, e.g. "at /age: must be >= 0 but found -1".
func (s *JSONSchema) Validate(text string) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
	if err != nil {
		return errors.New("it is not JSON")
	}
	err = s.sch.Validate(v)
	var ve *jsonschema.ValidationError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	for len(ve.Causes) > 0 { // the deepest cause names the field
		ve = ve.Causes[0]
	}
	at := "/" + strings.Join(ve.InstanceLocation, "/")
	return fmt.Errorf("at %s: %s", at, ve.ErrorKind.LocalizedString(printer))
}
