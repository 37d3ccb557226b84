package sqlite

// OnCompactSlice makes s call f after each of Compact's transactions, with how many
// streams it folded and how many are left. Set it before Compact is called.
func OnCompactSlice(s *Store, f func(done, left int)) { s.compactSliced = f }

// DriverName is the database/sql name of the driver the build uses.
const DriverName = driverName

// IsDriverError reports whether err carries an error of the driver, with SQLite's code.
func IsDriverError(err error) bool {
	_, ok := driverCode(err)
	return ok
}
