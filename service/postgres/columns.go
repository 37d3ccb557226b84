package postgres

// This file holds every SQL statement of the package, the column lists that go with the
// multi-row writes, and one typed scan helper per row type. Nothing else in the package
// spells SQL or scans a row by hand.
//
// Writes of many rows pass one array per column and turn them back into rows with
// unnest($1::text[], $2::bigint[], …): one statement, prepared once per connection (pgx
// caches it), whatever the number of rows.

import (
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Column types.

// scanner is a pgx.Row or pgx.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// Times are nanoseconds since the Unix epoch: exact, and ordered as the times are. The
// zero time is the smallest int64; other times must lie within int64 nanoseconds
// (timeFits), which Append checks before it writes.
const zeroTime = math.MinInt64

var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

// timeFits reports whether t can be stored.
func timeFits(t time.Time) bool {
	return t.IsZero() || (!t.Before(minTime) && !t.After(maxTime))
}

func dbTime(t time.Time) int64 {
	if t.IsZero() {
		return zeroTime
	}
	return t.UnixNano()
}

// dbBound is t as a bound for comparisons: times beyond what can be stored compare
// beyond every stored time.
func dbBound(t time.Time) int64 {
	switch {
	case t.IsZero():
		return zeroTime
	case t.Before(minTime):
		return math.MinInt64 + 1
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func dbNullTime(t *time.Time) pgtype.Int8 {
	if t == nil {
		return pgtype.Int8{}
	}
	return pgtype.Int8{Int64: dbTime(*t), Valid: true}
}

func goTime(n int64) time.Time {
	if n == zeroTime {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func goNullTime(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := goTime(*n)
	return &t
}

// dbText is free text as stored (bytea): its bytes, never nil (nil is NULL).
func dbText(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return []byte(s)
}

func dbNullText(s *string) []byte {
	if s == nil {
		return nil
	}
	return dbText(*s)
}

// textCol scans a NOT NULL bytea column of free text.
type textCol struct{ s *string }

func (c textCol) ScanBytes(b []byte) error {
	*c.s = string(b)
	return nil
}

// nullTextCol scans a bytea column of free text that may be NULL.
type nullTextCol struct{ s **string }

func (c nullTextCol) ScanBytes(b []byte) error {
	if b == nil {
		*c.s = nil
		return nil
	}
	s := string(b)
	*c.s = &s
	return nil
}

// sqlLimit turns "0 or less means no limit" into LIMIT NULL.
func sqlLimit(n int) any {
	if n <= 0 {
		return nil
	}
	return int64(n)
}

func utcPtr(t *time.Time) {
	if t != nil {
		*t = t.UTC()
	}
}
