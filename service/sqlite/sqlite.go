// Package sqlite is the durable service.Store: one SQLite file, through the pure-Go driver
// modernc.org/sqlite (no cgo), which is what the server uses by default. Build tags choose
// another driver: sqlite_ncruces for github.com/ncruces/go-sqlite3 (also pure Go, SQLite
// compiled to WebAssembly and translated to Go), sqlite_mattn for github.com/mattn/go-sqlite3
// (cgo: it needs a C compiler). The files driver_*.go hold what differs between them: how a
// connection is opened with its pragmas, and how the driver's errors carry SQLite's codes.
//
// One process owns the file at a time: Open takes an exclusive lock on a file beside it
// (path + ".lock") and fails at once with EUNAVAILABLE when another Store holds it, since
// two servers on one database would each recover and run the same agents and neither
// would see the other's events. Within the process, every write goes through a single
// connection (SQLite has one writer anyway, and this way writers queue in Go rather than
// spin on the busy timeout) and reads through a pool of read-only connections, which WAL
// mode lets run alongside the writer.
//
// The schema lives in migrations/ as goose migrations embedded in the binary; Open brings
// the file up to date. The SQL itself is confined to queries.go (and userqueries.go, for what
// the store keeps per user).
//
// The service writes through Append, which it calls once per round of its writer with
// every session's pending batches: one transaction with prepared statements, so that a
// busy server makes few, large commits.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/talkgraph/talkgraph/service"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options tune a Store. The zero value is a good default.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by another connection or
	// process before failing with EUNAVAILABLE. Default DefaultBusyTimeout.
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool. Default: GOMAXPROCS, at least 4.
	ReadConns int
	// FullSync makes every commit wait for the disk (synchronous=FULL), so that applied
	// batches survive a power loss too, at the cost of one flush per Apply. By default
	// they survive a crash of the process but not of the machine (see Open).
	FullSync bool
	// MaxBytes caps the size of the database; writes that would grow it further fail with
	// EUNAVAILABLE ("storage is full"), as on a full disk. 0 means no cap.
	MaxBytes int64
	// CompactHold is how long Compact writes before it commits what it folded so far and
	// lets the writer's rounds in. Default DefaultCompactHold.
	CompactHold time.Duration
}

// DefaultCompactHold is Options.CompactHold's default: folding a thousand finished
// replies at once takes a fifth of a second, which the streams still going must not wait
// for.
const DefaultCompactHold = 5 * time.Millisecond

// DefaultBusyTimeout is Options.BusyTimeout's default.
const DefaultBusyTimeout = 5 * time.Second

// Store is a service.Store in an SQLite file. It is safe for concurrent use.
type Store struct {
	path      string
	w         *sql.DB     // exactly one connection: every write, in BEGIN IMMEDIATE transactions
	r         *sql.DB     // read-only connections
	readConns int         // the read pool's size
	file      os.FileInfo // the database file as opened, to notice it being removed or replaced
	unlock    func() error
	closed    atomic.Bool

	wmu   sync.Mutex           // one transaction at a time on the writer connection
	stmts map[string]*sql.Stmt // the writes, prepared on the writer connection
	last  map[string]int64     // the Seq of sessions' last events, as committed (see appendTx)
	// viewerLast is the Seq of users' last viewer events, as committed, and hooked
	// whether a user has webhooks (enabled or not), for the users Append met: this store
	// is its file's only writer, so neither is read again (see tell.go). Both are guarded
	// by wmu.
	viewerLast map[string]int64
	hooked     map[string]bool
	hold       time.Duration // Options.CompactHold
	// compactSliced, when set (by tests), is called after each of Compact's transactions
	// with how many streams it folded and how many are left.
	compactSliced func(done, left int)

	ckpt               *sql.DB // one connection, for checkpoints
	stopCkpt, ckptDone chan struct{}
	reads              map[string]*sql.Stmt // the reads, prepared on the read pool
}

var _ service.Store = (*Store)(nil)
var _ service.SoleWriter = (*Store)(nil)
var _ service.MemoryReleaser = (*Store)(nil)
var _ service.SecretKeeper = (*Store)(nil)

// pageSize is SQLite's default page size, which this package does not change.
const pageSize = 4096

// Open opens the database at path, creating it and its directory when missing, and brings
// its schema up to date.
//
// Durability: the file is in WAL mode with synchronous=NORMAL unless opts.FullSync. In WAL
// mode a commit appends the transaction to the -wal file with write(2) before COMMIT
// returns; only the fsync is left to checkpoints. The data is then in the operating
// system's page cache, which a crash of the process (even kill -9) does not lose: the next
// Open replays the WAL. A power loss or kernel crash can roll back the last commits (never
// corrupt the file); FullSync closes that window by syncing the WAL on every commit.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: open: empty path")
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	if opts.CompactHold <= 0 {
		opts.CompactHold = DefaultCompactHold
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: open: %w: %w",
			service.Errorf(service.EUNAVAILABLE, "storage directory %s cannot be created", filepath.Dir(abs)), err)
	}
	if err := restrictFile(abs); err != nil {
		return nil, fmt.Errorf("sqlite: open: %w: %w",
			service.Errorf(service.EUNAVAILABLE, "storage %s cannot be created", abs), err)
	}
	unlock, err := lockFile(abs + ".lock")
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("sqlite: open: %w: %w",
			service.Errorf(service.EUNAVAILABLE, "storage %s is in use by another process", abs), err)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w: %w",
			service.Errorf(service.EUNAVAILABLE, "storage %s cannot be locked", abs), err)
	}

	s := &Store{path: abs, unlock: unlock, hold: opts.CompactHold}
	if err := s.open(ctx, opts); err != nil {
		s.release()
		if cannotWrite(abs) {
			// Some drivers (ncruces's file layer) say only that the file cannot be
			// opened when it can be read but not written: say what is wrong.
			return nil, fmt.Errorf("sqlite: open: %w: %w",
				service.Errorf(service.EUNAVAILABLE, "storage %s is read-only", abs), err)
		}
		return nil, s.fail("open", err)
	}
	return s, nil
}

// cannotWrite reports whether the file at path exists and cannot be opened for writing.
func cannotWrite(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return false
	}
	return !errors.Is(err, os.ErrNotExist)
}

// restrictFile makes the database file readable by its owner only (it holds the users'
// conversations and the token signing secret), creating it so when it does not exist;
// SQLite gives its -wal and -shm files the same mode.
func restrictFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrPermission) {
		return nil // read-only: let SQLite say what is wrong
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return f.Chmod(fi.Mode().Perm() &^ 0o077)
	}
	return nil
}

// open sets up both pools and migrates the schema.
func (s *Store) open(ctx context.Context, opts Options) error {
	busy := fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds())
	syncMode := "NORMAL" // see Open
	if opts.FullSync {
		syncMode = "FULL"
	}
	wp := []string{
		busy,
		"journal_mode(WAL)",
		// Foreign keys stay unenforced: the store keeps every row with its session itself
		// (appends check the session, deletion deletes what belongs to it), and a checked
		// key makes SQLite keep a statement journal for every insert of the streaming path.
		"foreign_keys(0)",
		// Statement journals and sorts stay in memory: a spilled one is a temporary file
		// created, written and removed within a round, syscalls the writer waits on.
		"temp_store(MEMORY)",
		// Checkpoints (copying the WAL into the file, with an fsync) run on a connection of
		// their own, off the writer's commits (see checkpoints).
		"wal_autocheckpoint(0)",
		"journal_size_limit(67108864)",
		"synchronous(" + syncMode + ")",
	}
	if opts.MaxBytes > 0 {
		wp = append(wp, fmt.Sprintf("max_page_count(%d)", max(1, opts.MaxBytes/pageSize)))
	}
	// The writer takes the write lock at BEGIN, not halfway through.
	w, err := connect(s.path, wp, true)
	if err != nil {
		return err
	}
	s.w = w
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	var mode string
	if err := w.QueryRowContext(ctx, qJournalMode).Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, not WAL", mode)
	}
	if err := migrate(ctx, w); err != nil {
		return err
	}
	s.stmts, s.last = map[string]*sql.Stmt{}, map[string]int64{}
	s.viewerLast, s.hooked = map[string]int64{}, map[string]bool{}
	for _, q := range writes {
		st, err := w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		s.stmts[q] = st
	}

	r, err := connect(s.path, []string{busy, "query_only(1)", "temp_store(MEMORY)"}, false)
	if err != nil {
		return err
	}
	s.r = r
	s.readConns = opts.ReadConns
	r.SetMaxOpenConns(opts.ReadConns)
	r.SetMaxIdleConns(opts.ReadConns)
	r.SetConnMaxIdleTime(0)
	r.SetConnMaxLifetime(0)
	s.reads = map[string]*sql.Stmt{}
	for _, q := range reads {
		st, err := r.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		s.reads[q] = st
	}
	if err := r.PingContext(ctx); err != nil {
		return err
	}
	if s.file, err = os.Stat(s.path); err != nil {
		return err
	}
	if s.ckpt, err = connect(s.path, []string{busy}, false); err != nil {
		return err
	}
	s.ckpt.SetMaxOpenConns(1)
	s.stopCkpt, s.ckptDone = make(chan struct{}), make(chan struct{})
	go s.checkpoints()
	// Better to refuse to start than to fail on the first write.
	return s.ping(ctx)
}

// checkpointEvery is how often the WAL is copied into the database file.
const checkpointEvery = time.Second

// checkpoints copies the WAL into the database file every checkpointEvery, on a
// connection of its own: a PASSIVE checkpoint waits for nobody and blocks no writer, so
// the fsync it ends with never lands on a commit that a client waits for.
func (s *Store) checkpoints() {
	defer close(s.ckptDone)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stopCkpt:
			return
		case <-t.C:
			var busy, log, done int
			if err := s.ckpt.QueryRow(qCheckpoint).Scan(&busy, &log, &done); err != nil {
				continue // the next one tries again; a full disk shows in Ping
			}
		}
	}
}

// migrate brings the schema up to the newest embedded migration.
func migrate(ctx context.Context, db *sql.DB) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// dsn is the name of the file at the absolute path abs with the query q, for the drivers
// that take their settings in it: a file: URI, so that no character of the path is taken
// for part of the query.
func dsn(abs string, q url.Values) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // C:/x on Windows
	}
	p = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(p)
	return "file://" + p + "?" + q.Encode()
}

// Close implements service.Store. Committed batches are durable already; Close releases
// the connections and the file's lock.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.release()
}

func (s *Store) release() error {
	var errs []error
	if s.stopCkpt != nil {
		close(s.stopCkpt)
		<-s.ckptDone
		errs = append(errs, s.ckpt.Close())
	}
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	for _, st := range s.reads {
		errs = append(errs, st.Close())
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.unlock != nil {
		errs = append(errs, s.unlock())
	}
	return errors.Join(errs...)
}

// Ping implements service.Store: it takes the write lock and writes a 64 KiB row, then
// rolls back, so it fails while the file is locked by another process, read-only, or at
// its MaxBytes; and it fails while the file system has less than minFree bytes free, when
// real writes (which can be larger than any probe) would fail. It also fails once the file
// has been removed or replaced: SQLite would go on writing to the unlinked file, and
// everything written then would be lost with the process.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if s.file != nil {
		fi, err := os.Stat(s.path)
		if err != nil || !os.SameFile(fi, s.file) {
			return fmt.Errorf("sqlite: ping: %w: %w",
				service.Errorf(service.EUNAVAILABLE, "storage file %s was removed or replaced", s.path),
				cmp.Or(err, errors.New("not the file that was opened")))
		}
	}
	if free, ok := freeBytes(filepath.Dir(s.path)); ok && free < minFree {
		return service.Errorf(service.EUNAVAILABLE, "storage is full (%d KiB free on its disk)", free>>10)
	}
	return s.fail("ping", s.ping(ctx))
}

// minFree is the least free space on the database's file system for Ping to pass.
const minFree = 1 << 20

// ping writes and rolls back.
func (s *Store) ping(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, qPing)
	return err
}

// SoleWriter implements service.SoleWriter: the store holds its file's lock, so no other
// process writes the file (where the platform has file locks; elsewhere two stores on one
// file both work, and this answers false).
func (s *Store) SoleWriter() bool { return lockable }

// Secret returns the value stored under name, or, the first time, stores what gen returns
// and returns that. The server keeps its token signing secret here.
func (s *Store) Secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, s.fail("secret", err)
	}
	defer tx.Rollback()
	var v []byte
	err = tx.QueryRowContext(ctx, qMeta, "secret:"+name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, s.fail("secret", err)
	}
	if v, err = gen(); err != nil {
		return nil, fmt.Errorf("sqlite: secret %s: %w", name, err)
	}
	if v == nil {
		v = []byte{}
	}
	if _, err := tx.ExecContext(ctx, qInsertMeta, "secret:"+name, v); err != nil {
		return nil, s.fail("secret", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, s.fail("secret", err)
	}
	return v, nil
}

// check returns EUNAVAILABLE once the store is closed.
func (s *Store) check() error {
	if s.closed.Load() {
		return service.Errorf(service.EUNAVAILABLE, "storage is closed")
	}
	return nil
}
