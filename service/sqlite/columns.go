package sqlite

// This file holds every SQL statement of the package, the argument lists that go with the
// writes, and one typed scan helper per row type. Nothing else in the package spells SQL or
// scans a row by hand.

import (
	"encoding/json"
	"fmt"
	"time"
)

// Column types.

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// timeLayout stores times in UTC with all nine digits of nanoseconds and a fixed width, so
// that TEXT comparison orders them and parsing gives back exactly the same instant.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func dbTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func dbNullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return dbTime(*t)
}

func dbNullString(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func parseTime(src any) (time.Time, error) {
	var s string
	switch v := src.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return time.Time{}, fmt.Errorf("time column holds %T", src)
	}
	return time.Parse(timeLayout, s)
}

// timeCol scans a NOT NULL time column.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) (err error) {
	*c.t, err = parseTime(src)
	return err
}

// nullTimeCol scans a time column that may be NULL.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(src any) error {
	if src == nil {
		*c.t = nil
		return nil
	}
	t, err := parseTime(src)
	*c.t = &t
	return err
}

// jsonCol scans a JSON column into v (a pointer); NULL leaves it as it is (nil).
type jsonCol struct{ v any }

func (c jsonCol) Scan(src any) error {
	switch b := src.(type) {
	case nil:
		return nil
	case string:
		return json.Unmarshal([]byte(b), c.v)
	case []byte:
		return json.Unmarshal(b, c.v)
	}
	return fmt.Errorf("JSON column holds %T", src)
}

func utcPtr(t *time.Time) {
	if t != nil {
		*t = t.UTC()
	}
}
