package move_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/move"
)

// Rows larger than the copy's chunk cross whole; a table keyed by a replica identity index
// alone, and a partition tree two levels deep keyed on its root, get their keys on the target
// after the copy, and the changes made during the move are applied through them.
func TestMoveCopiesOddShapes(t *testing.T) {
	e := newMoveEnv(t)
	e.asOwner(e.src, `CREATE SCHEMA shapes;
		CREATE TABLE shapes.big (id int PRIMARY KEY, body text, blob bytea);
		INSERT INTO shapes.big SELECT i, repeat(md5(i::text), 40000), decode(repeat(md5((i * 7)::text), 30000), 'hex')
			FROM generate_series(1, 5) i;
		CREATE TABLE shapes.ident (id int NOT NULL, v text);
		CREATE UNIQUE INDEX ident_id ON shapes.ident (id);
		ALTER TABLE shapes.ident REPLICA IDENTITY USING INDEX ident_id;
		INSERT INTO shapes.ident SELECT i, i::text FROM generate_series(1, 1000) i;
		CREATE TABLE shapes.tree (id int, k int, v text, PRIMARY KEY (k, id)) PARTITION BY RANGE (k);
		CREATE TABLE shapes.tree_lo PARTITION OF shapes.tree FOR VALUES FROM (0) TO (50) PARTITION BY HASH (id);
		CREATE TABLE shapes.tree_lo_0 PARTITION OF shapes.tree_lo FOR VALUES WITH (MODULUS 2, REMAINDER 0);
		CREATE TABLE shapes.tree_lo_1 PARTITION OF shapes.tree_lo FOR VALUES WITH (MODULUS 2, REMAINDER 1);
		CREATE TABLE shapes.tree_hi PARTITION OF shapes.tree FOR VALUES FROM (50) TO (100);
		INSERT INTO shapes.tree SELECT i, i % 100, i::text FROM generate_series(1, 2000) i;`)
	tables := []string{"shapes.big", "shapes.ident", "shapes.tree"}
	// A reader in a long transaction on the source keeps it from being dropped once the move
	// has finished, until its rows are compared with the target's.
	reader := e.NodeConn(e.src, pgcluster.Superuser)
	if _, err := reader.Exec(ctx, `BEGIN; SELECT count(*) FROM shapes.big`); err != nil {
		t.Fatal(err)
	}
	// Changes made after the copy, applied by key in the catch-up.
	var once sync.Once
	e.worker(move.Mover{AfterStep: func(_ context.Context, step string) error {
		if step == move.StepIndexes {
			once.Do(func() {
				e.NodeExec(e.src, `UPDATE shapes.big SET body = repeat('x', 600000) WHERE id = 3;
					UPDATE shapes.ident SET v = 'changed' WHERE id % 10 = 0; DELETE FROM shapes.ident WHERE id % 7 = 0;
					UPDATE shapes.tree SET v = 'changed' WHERE id % 3 = 0; DELETE FROM shapes.tree WHERE id % 11 = 0;
					UPDATE shapes.tree SET k = 99 WHERE id = 4`)
			})
		}
		return nil
	}})
	id := e.submit(move.Request{Schema: "shapes", From: "g1", To: "g2"})
	if job := e.Wait(id, 2*time.Minute); job.State != deckhandtype.JobFinished {
		t.Fatalf("move: %s: %s", job.State, e.lastError(id))
	}
	want, got := e.checksums(e.src, tables...), e.checksums(e.dst, tables...)
	for _, tbl := range tables {
		if got[tbl] != want[tbl] {
			t.Errorf("%s differs on the target", tbl)
		}
	}
	conn := e.NodeConn(e.dst, pgcluster.Superuser)
	defer conn.Close(ctx)
	var ident string
	var keys int
	if err := conn.QueryRow(ctx, `SELECT (SELECT relreplident::text FROM pg_class WHERE oid = 'shapes.ident'::regclass),
		(SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = 'shapes' AND i.indisprimary)`).Scan(&ident, &keys); err != nil {
		t.Fatal(err)
	}
	var moved int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM shapes.tree_hi WHERE id = 4 AND k = 99`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	// big, tree, tree_lo, tree_lo_0, tree_lo_1, tree_hi
	if ident != "i" || keys != 6 || moved != 1 {
		t.Errorf("on the target: shapes.ident's replica identity %q (want i), %d primary keys (want 6), %d rows moved across partitions in the catch-up (want 1)", ident, keys, moved)
	}
}
