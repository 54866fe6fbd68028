package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"

	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlcore"
)

func TestStmtCache(t *testing.T) {
	inFileAndMemory(t, func(t *testing.T, path string) {
		ctx := t.Context()
		s, err := Open(ctx, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		closed := false
		defer func() {
			if !closed {
				s.Close()
			}
		}()

		a, err := s.readStmt(ctx, getConversation)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.readStmt(ctx, getConversation)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Error("readStmt prepared the same query twice")
		}
		w, err := s.writeStmt(ctx, `INSERT INTO users (id, name, created_at) VALUES (?, ?, 0)`)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.ExecContext(ctx, "ada", "Ada"); err != nil {
			t.Fatal(err)
		}
		if u, err := s.GetUser(ctx, "ada"); err != nil || u.Name != "Ada" {
			t.Errorf("GetUser after the prepared insert: %+v, %v", u, err)
		}

		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		closed = true
		if _, err := s.readStmt(ctx, `SELECT 1`); err == nil {
			t.Error("readStmt of a closed store: no error")
		}
		if _, err := a.QueryContext(ctx, "x"); err == nil {
			t.Error("a statement of a closed store still runs")
		}
	})
}

// TestTxStmtFirstUse: the first txStmt of a query, inside s.tx, must not
// wait for the writer's connection (which the transaction holds), and the
// query is prepared on the writer once the transaction is over.
func TestTxStmtFirstUse(t *testing.T) {
	inFileAndMemory(t, func(t *testing.T, path string) {
		s := open(t, path)
		const q = `INSERT INTO users (id, name, created_at) VALUES (?, 'x', 0)`
		insert := func(id string) {
			t.Helper()
			err := s.tx(t.Context(), func(tx *sql.Tx) error {
				st, err := s.txStmt(t.Context(), tx, q)
				if err != nil {
					return err
				}
				_, err = st.ExecContext(t.Context(), id)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}

		insert("a")
		first, ok := s.writeStmts.lookup(q)
		if !ok {
			t.Fatal("not prepared on the writer after the first transaction")
		}
		insert("b")
		if again, _ := s.writeStmts.lookup(q); again != first {
			t.Error("prepared again by the second transaction")
		}
		for _, id := range []string{"a", "b"} {
			if _, err := s.GetUser(t.Context(), id); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestTxStmtReusesDriverStatement checks what txStmt relies on in
// database/sql: tx.StmtContext of a statement already prepared on the
// transaction's connection runs that driver statement instead of preparing
// the query again. The driver here counts the prepares reaching SQLite.
func TestTxStmtReusesDriverStatement(t *testing.T) {
	ctx := t.Context()
	const q = `INSERT INTO t (x) VALUES (?)`
	c := &countingConnector{
		dsn:      filepath.Join(t.TempDir(), "t.db") + "?_journal_mode=WAL&_txlock=immediate",
		prepares: map[string]*atomic.Int64{q: new(atomic.Int64)},
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (x BIGINT)`); err != nil {
		t.Fatal(err)
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	base := c.prepares[q].Load()

	for i := range 10 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, i); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.ExecContext(ctx, 10); err != nil { // and outside a transaction
		t.Fatal(err)
	}
	if base != 1 {
		t.Errorf("PrepareContext prepared %d times, want 1", base)
	}
	if n := c.prepares[q].Load() - base; n != 0 {
		t.Errorf("11 uses of the prepared statement prepared it %d more times, want 0", n)
	}
}

// countingConnector opens modernc connections that count their prepares
// of the queries in prepares.
type countingConnector struct {
	dsn      string
	prepares map[string]*atomic.Int64 // query → prepares; read-only
}

func (c *countingConnector) Connect(context.Context) (driver.Conn, error) {
	dc, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return countingConn{dc.(conn), c}, nil
}

func (c *countingConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// conn is what database/sql uses of a modernc connection here.
type conn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
}

type countingConn struct {
	conn
	c *countingConnector
}

func (cc countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if n, ok := cc.c.prepares[query]; ok {
		n.Add(1)
	}
	return cc.conn.PrepareContext(ctx, query)
}

// The statements of sqlcore that the tests and benchmarks here use, in its
// words: GetConversation's and CreateConversation's. The unprepared runs
// compile them as the cache prepares them (positional).
const (
	getConversation    = `SELECT id, tenant, env, user_id, title, created_at FROM conversations WHERE id = $1`
	insertConversation = `INSERT INTO conversations (id, tenant, env, user_id, title, created_at) VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (id) DO NOTHING`
)

// scanConversation scans a row of getConversation.
func scanConversation(r *sql.Row) (store.Conversation, error) {
	var (
		c       store.Conversation
		created int64
	)
	err := r.Scan(&c.ID, &c.Tenant, &c.Env, &c.UserID, &c.Title, &created)
	c.CreatedAt = sqlcore.FromMillis(created)
	return c, err
}

// benchStore is a file store with a user, an env and n conversations, c0…
func benchStore(b testing.TB, n int) *Store {
	b.Helper()
	ctx := b.Context()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "talkide.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w"}); err != nil {
		b.Fatal(err)
	}
	if err := s.PutUser(ctx, store.User{ID: "ada", Name: "Ada"}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		c := store.Conversation{ID: fmt.Sprint("c", i), Tenant: "acme", Env: "prod", UserID: "ada", Title: "a title"}
		if _, _, err := s.CreateConversation(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkGetConversation compares GetConversation (a prepared statement)
// with the same query compiled at every call, as before.
func BenchmarkGetConversation(b *testing.B) {
	const n = 1000
	s := benchStore(b, n)
	ctx := b.Context()
	b.Run("prepared", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := s.GetConversation(ctx, fmt.Sprint("c", i%n)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("unprepared", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := scanConversation(s.reader.QueryRowContext(ctx, positional(getConversation), fmt.Sprint("c", i%n))); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkInsert compares an INSERT prepared once with one compiled at
// every call, in a transaction of its own (s.tx) and on its own.
func BenchmarkInsert(b *testing.B) {
	s := benchStore(b, 0)
	ctx := b.Context()
	id := 0
	args := func() []any {
		id++
		return []any{fmt.Sprint("c", id), "acme", "prod", "ada", "a title", int64(0)}
	}
	run := func(b *testing.B, insert func() error) {
		for b.Loop() {
			if err := insert(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("tx/prepared", func(b *testing.B) {
		run(b, func() error {
			return s.tx(ctx, func(tx *sql.Tx) error {
				st, err := s.txStmt(ctx, tx, insertConversation)
				if err != nil {
					return err
				}
				_, err = st.ExecContext(ctx, args()...)
				return err
			})
		})
	})
	b.Run("tx/unprepared", func(b *testing.B) {
		run(b, func() error {
			return s.tx(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, positional(insertConversation), args()...)
				return err
			})
		})
	})
	b.Run("autocommit/prepared", func(b *testing.B) {
		run(b, func() error {
			st, err := s.writeStmt(ctx, insertConversation)
			if err != nil {
				return err
			}
			_, err = st.ExecContext(ctx, args()...)
			return err
		})
	})
	b.Run("autocommit/unprepared", func(b *testing.B) {
		run(b, func() error {
			_, err := s.writer.ExecContext(ctx, positional(insertConversation), args()...)
			return err
		})
	})
}
