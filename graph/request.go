package graph

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/talkgraph/talkgraph/service"
)

// A GraphQL request's JSON (a POST or server-sent events body, a websocket's subscribe
// payload, GET's variables) is checked before it is decoded, because Go's decoder takes
// text that is not valid UTF-8 and escapes of lone UTF-16 surrogates (\ud800) as U+FFFD
// without a word, and its errors (and gqlgen's) repeat the input. CheckRequest refuses
// such a request with EINVALID and a message that says what is wrong and where, quoting
// nothing of the input but a character or two: text that is not valid UTF-8 or holds a
// lone surrogate, JSON that does not parse, or members of the wrong kind.

// CheckRequest checks that body is one GraphQL request as JSON: an object whose query and
// operationName are strings, whose variables and extensions are objects (each may be
// null), whose headers map names to lists of strings, all its text valid UTF-8 without
// lone surrogates. The names are matched regardless of case, as Go's decoder does; other
// members are allowed.
func CheckRequest(body []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil {
		return jsonError(body, err, "")
	} else if tok.Kind() != '{' {
		return service.Errorf(service.EINVALID, "the request must be a JSON object with a query")
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return jsonError(body, err, "")
		}
		name := tok.String()
		var want string
		switch {
		case strings.EqualFold(name, "query"), strings.EqualFold(name, "operationName"):
			want = `"n`
		case strings.EqualFold(name, "variables"), strings.EqualFold(name, "extensions"):
			want = "{n"
		case strings.EqualFold(name, "headers"):
			if err := checkHeaders(dec, body); err != nil {
				return err
			}
			continue
		}
		if k := dec.PeekKind(); want != "" && k != 0 && !strings.ContainsRune(want, rune(k)) {
			return service.Errorf(service.EINVALID, "%s must be %s", member(name), kindName(want))
		}
		if err := dec.SkipValue(); err != nil {
			return jsonError(body, err, "")
		}
	}
	if _, err := dec.ReadToken(); err != nil { // the object's end
		return jsonError(body, err, "")
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			return service.Errorf(service.EINVALID, "the request holds more than one JSON value")
		}
		return jsonError(body, err, "")
	}
	return nil
}

// DecodeRequest checks body (see CheckRequest) and decodes it into params.
func DecodeRequest(body []byte, params *graphql.RawParams) error {
	if err := CheckRequest(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(params); err != nil {
		// CheckRequest let through nothing the decoder refuses; should it, say so plainly.
		return service.Errorf(service.EINVALID, "the request is not a GraphQL request")
	}
	return nil
}

// CheckJSONObject checks that raw, the value of the request member what (GET's variables
// and extensions), is a JSON object (or null) whose text is valid UTF-8 without lone
// surrogates.
func CheckJSONObject(what string, raw []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true))
	if k := dec.PeekKind(); k != '{' && k != 'n' && k != 0 {
		return service.Errorf(service.EINVALID, "%s must be a JSON object", what)
	}
	if err := dec.SkipValue(); err != nil {
		return jsonError(raw, err, what)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			return service.Errorf(service.EINVALID, "%s holds more than one JSON value", what)
		}
		return jsonError(raw, err, what)
	}
	return nil
}

// checkHeaders checks a request's headers member: null, or an object of lists of strings
// (or null), what Go's decoder takes into an http.Header.
func checkHeaders(dec *jsontext.Decoder, body []byte) error {
	bad := service.Errorf(service.EINVALID, "headers must be an object of lists of strings")
	switch dec.PeekKind() {
	case 'n':
		_, err := dec.ReadToken()
		return jsonError(body, err, "")
	case '{':
	case 0:
		_, err := dec.ReadToken()
		return jsonError(body, err, "")
	default:
		return bad
	}
	if _, err := dec.ReadToken(); err != nil {
		return jsonError(body, err, "")
	}
	for dec.PeekKind() == '"' {
		if _, err := dec.ReadToken(); err != nil { // a name
			return jsonError(body, err, "")
		}
		switch dec.PeekKind() {
		case 'n':
		case '[':
			if _, err := dec.ReadToken(); err != nil {
				return jsonError(body, err, "")
			}
			for dec.PeekKind() == '"' {
				if _, err := dec.ReadToken(); err != nil {
					return jsonError(body, err, "")
				}
			}
			if k := dec.PeekKind(); k != ']' && k != 0 {
				return bad
			}
		case 0:
		default:
			return bad
		}
		if _, err := dec.ReadToken(); err != nil { // null, or the list's end
			return jsonError(body, err, "")
		}
	}
	if k := dec.PeekKind(); k != '}' && k != 0 {
		return bad
	}
	_, err := dec.ReadToken()
	return jsonError(body, err, "")
}

// jsonError describes err, an error of reading body as JSON: text that is not valid UTF-8
// or holds a lone surrogate, by where it is; anything else as JSON that does not parse, by
// its byte offset. root names body when it is a request's member (variables), "" for the
// request itself. nil for nil.
func jsonError(body []byte, err error, root string) error {
	if err == nil {
		return nil
	}
	what, where := "the request", root
	if root != "" {
		what = root
	}
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return service.Errorf(service.EINVALID, "%s is not JSON: it ends too soon", what)
		}
		return service.Errorf(service.EINVALID, "%s is not JSON", what)
	}
	if p := path(se.JSONPointer); p != "" && where != "" {
		where += "." + p
	} else if p != "" {
		where = p
	} else if where == "" {
		where = what
	}
	if se.ByteOffset >= 0 && se.ByteOffset < int64(len(body)) {
		switch bad := badText(body[se.ByteOffset:]); {
		case bad == "utf8":
			return service.Errorf(service.EINVALID, "text in %s is not valid UTF-8", where)
		case bad != "":
			return service.Errorf(service.EINVALID, "text in %s holds a lone UTF-16 surrogate (%s), which is not a character", where, bad)
		}
	}
	reason := "it does not parse"
	if errors.Is(se.Err, io.ErrUnexpectedEOF) {
		reason = "it ends too soon"
	} else if se.Err != nil {
		reason = clip(se.Err.Error(), 80)
	}
	return service.Errorf(service.EINVALID, "%s is not JSON: %s (at byte %d)", what, reason, se.ByteOffset)
}

// badText looks at the text s starts with, where the JSON decoder found a fault: it
// returns "utf8" for bytes that are not valid UTF-8, the escape of a lone surrogate
// (`\ud800`) for one, and "" for any other fault. Should the fault's offset be that of the
// string holding it, the string is looked through.
func badText(s []byte) string {
	if len(s) == 0 {
		return ""
	}
	if r, n := utf8.DecodeRune(s); r == utf8.RuneError && n <= 1 {
		return "utf8"
	}
	if r, ok := escape(s); ok && utf16.IsSurrogate(r) {
		return string(s[:6])
	}
	if s[0] != '"' {
		return ""
	}
	for i := 1; i < len(s); {
		switch c := s[i]; {
		case c == '"':
			return ""
		case c == '\\':
			r, ok := escape(s[i:])
			switch {
			case !ok:
				i += 2
			case !utf16.IsSurrogate(r):
				i += 6
			default:
				if r2, ok := escape(s[i+6:]); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
					i += 12
					continue
				}
				return string(s[i : i+6])
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n <= 1 {
				return "utf8"
			}
			i += n
		}
	}
	return ""
}

// escape reads the escape `\uXXXX` that s starts with.
func escape(s []byte) (rune, bool) {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return 0, false
	}
	return hex4(s[2:])
}

// hex4 reads the four hexadecimal digits that s starts with.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// path writes a JSON pointer as member names joined by dots (variables.input.content),
// each cut short, and the whole at most some 100 bytes: names come from the client.
func path(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		if b.Len() > 100 {
			b.WriteString("…")
			break
		}
		b.WriteString(clip(tok, 40))
	}
	return b.String()
}

// member names a request member for a message, cut short.
func member(name string) string { return clip(name, 40) }

func kindName(want string) string {
	if want == "{n" {
		return "an object"
	}
	return "a string"
}

// clip makes s valid UTF-8 of at most n runes, with … when cut.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
