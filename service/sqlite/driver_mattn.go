//go:build sqlite_mattn

package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net/url"

	"github.com/mattn/go-sqlite3"
)

// driverName is the database/sql name of the driver the build uses:
// github.com/mattn/go-sqlite3 (build tag sqlite_mattn; it needs cgo and a C compiler).
const driverName = "sqlite3"

// connect opens a pool of connections to the file at the absolute path abs, each set up
// with pragmas ("name(value)") in order, and beginning its transactions with BEGIN
// IMMEDIATE when immediate is set (else BEGIN DEFERRED). The mattn driver takes _txlock in
// the file: URI but only some pragmas, each under a name of its own, so the connector
// below runs them all as statements once the connection is open.
func connect(abs string, pragmas []string, immediate bool) (*sql.DB, error) {
	q := url.Values{}
	if immediate {
		q.Set("_txlock", "immediate")
	} else {
		q.Set("_txlock", "deferred")
	}
	return sql.OpenDB(&connector{name: dsn(abs, q), pragmas: pragmas}), nil
}

// connector opens mattn's connections and runs pragmas on each.
type connector struct {
	name    string
	pragmas []string
}

var mattnDriver = &sqlite3.SQLiteDriver{}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := mattnDriver.Open(c.name)
	if err != nil {
		return nil, err
	}
	sc := conn.(*sqlite3.SQLiteConn)
	for _, p := range c.pragmas {
		if _, err := sc.ExecContext(ctx, "PRAGMA "+p, nil); err != nil {
			sc.Close()
			return nil, err
		}
	}
	return conn, nil
}

func (c *connector) Driver() driver.Driver { return mattnDriver }

// driverCode returns SQLite's primary result code from the driver's error in err, and
// false when err holds none.
func driverCode(err error) (int, bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return 0, false
	}
	return int(se.Code), true
}
