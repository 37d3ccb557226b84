//go:build !sqlite_ncruces && !sqlite_mattn

package sqlite

import (
	"database/sql"
	"errors"
	"net/url"

	"modernc.org/sqlite"
)

// driverName is the database/sql name of the driver the build uses: modernc.org/sqlite,
// the default.
const driverName = "sqlite"

// connect opens a pool of connections to the file at the absolute path abs, each set up
// with pragmas ("name(value)") in order, and beginning its transactions with BEGIN
// IMMEDIATE when immediate is set (else BEGIN DEFERRED). modernc.org/sqlite takes both in
// the file: URI: a _pragma parameter each, and _txlock.
func connect(abs string, pragmas []string, immediate bool) (*sql.DB, error) {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	if immediate {
		q.Set("_txlock", "immediate")
	}
	return sql.Open(driverName, dsn(abs, q))
}

// driverCode returns SQLite's primary result code from the driver's error in err, and
// false when err holds none.
func driverCode(err error) (int, bool) {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return se.Code() & 0xff, true // the primary code of an extended one
}
