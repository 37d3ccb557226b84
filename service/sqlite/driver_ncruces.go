//go:build sqlite_ncruces && !sqlite_mattn

package sqlite

import (
	"database/sql"
	"errors"
	"net/url"
	"strings"

	"github.com/ncruces/go-sqlite3"
	_ "github.com/ncruces/go-sqlite3/driver" // registers "sqlite3"
)

// driverName is the database/sql name of the driver the build uses:
// github.com/ncruces/go-sqlite3 (build tag sqlite_ncruces).
const driverName = "sqlite3"

// connect opens a pool of connections to the file at the absolute path abs, each set up
// with pragmas ("name(value)") in order, and beginning its transactions with BEGIN
// IMMEDIATE when immediate is set (else BEGIN DEFERRED). The ncruces driver takes both in
// the file: URI as modernc.org/sqlite does, but its transactions are IMMEDIATE unless told
// otherwise, so DEFERRED is asked for explicitly.
//
// Its VFS, written in Go, creates the -wal and -shm files with the umask's mode rather than
// the database's: modeof gives the -wal file the database's mode, and the -shm file (which
// stays while a connection is open) is made beforehand, for the owner only.
func connect(abs string, pragmas []string, immediate bool) (*sql.DB, error) {
	if err := restrictFile(abs + "-shm"); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("modeof", abs)
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	if immediate {
		q.Set("_txlock", "immediate")
	} else {
		q.Set("_txlock", "deferred")
	}
	// SQLite, which reads modeof, decodes %20 in a URI but not +.
	return sql.Open(driverName, strings.ReplaceAll(dsn(abs, q), "+", "%20"))
}

// driverCode returns SQLite's primary result code from the driver's error in err, and
// false when err holds none.
func driverCode(err error) (int, bool) {
	// *sqlite3.Error converts to its primary code, and so do the bare codes the driver
	// also returns (MISUSE, INTERRUPT, …).
	var code sqlite3.ErrorCode
	if !errors.As(err, &code) {
		return 0, false
	}
	return int(code), true
}
