package logicalapply_test

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
)

// workload makes random transactions of every kind the applier handles: inserts with
// identity keys and foreign keys, cascading deletes, jsonb and array values, rows moving
// between partitions, updates that leave a TOASTed column alone, key updates, truncates.
type workload struct {
	rnd   *rand.Rand
	steps int
	docID int
	event int64
}

func newWorkload(seed uint64) *workload {
	return &workload{rnd: rand.New(rand.NewPCG(seed, 42)), docID: 1000, event: 100000}
}

// step runs one source transaction of one to four operations.
func (w *workload) step(ctx context.Context, conn *pgx.Conn) error {
	w.steps++
	ops := 1
	if w.rnd.IntN(5) == 0 {
		ops = 2 + w.rnd.IntN(3)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for range ops {
			if err := w.op(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	})
}

func (w *workload) op(ctx context.Context, tx pgx.Tx) error {
	var sql string
	var args []any
	switch k := w.rnd.IntN(100); {
	case k < 15: // a customer with orders
		sql = `WITH c AS (INSERT INTO app.customers (name, tier, mood) VALUES ($1, $2, $3) RETURNING id)
			INSERT INTO app.orders (customer_id, total) SELECT c.id, g * 9.99 FROM c, generate_series(1, $4) g`
		args = []any{fmt.Sprintf("new customer %d ✓ 'quoted'", w.steps), w.rnd.IntN(5), []string{"calm", "busy", "odd'one"}[w.rnd.IntN(3)], 1 + w.rnd.IntN(3)}
	case k < 25:
		sql = `UPDATE app.customers SET tier = tier + 1, mood = NULL WHERE id = (SELECT id FROM app.customers WHERE id >= $1 ORDER BY id LIMIT 1)`
		args = []any{1 + w.rnd.IntN(300)}
	case k < 30: // cascades to the orders
		sql = `DELETE FROM app.customers WHERE id = (SELECT id FROM app.customers WHERE id >= $1 ORDER BY id LIMIT 1)`
		args = []any{1 + w.rnd.IntN(300)}
	case k < 40:
		sql = `UPDATE app.orders SET total = total * 1.1 WHERE customer_id = (SELECT customer_id FROM app.orders WHERE customer_id >= $1 ORDER BY customer_id LIMIT 1)`
		args = []any{1 + w.rnd.IntN(300)}
	case k < 50:
		w.docID++
		sql = `INSERT INTO app.docs VALUES ($1, jsonb_build_object('step', $2::int, 'text', 'a "quoted" \ value', 'list', jsonb_build_array(1, 'two', NULL)), $3)
			ON CONFLICT (id) DO UPDATE SET body = app.docs.body || excluded.body, tags = NULL`
		args = []any{1 + w.rnd.IntN(w.docID), w.steps, []string{"t", fmt.Sprint(w.steps)}}
	case k < 53:
		sql = `DELETE FROM app.docs WHERE id = $1`
		args = []any{1 + w.rnd.IntN(w.docID)}
	case k < 63:
		w.event++
		sql = `INSERT INTO app.events VALUES ($1, DATE '2026-01-01' + $2::int, $3)`
		args = []any{w.event, w.rnd.IntN(90), fmt.Sprintf("event %d", w.event)}
	case k < 70: // the partition key changes: the row moves to another partition
		sql = `UPDATE app.events SET day = day + 31, payload = payload || '>' WHERE id = (SELECT id FROM app.events WHERE id >= $1 ORDER BY id LIMIT 1)`
		args = []any{int64(1 + w.rnd.IntN(int(w.event)))}
	case k < 82: // the TOASTed column is left alone
		sql = `UPDATE app.blobs SET counter = counter + 1, raw = raw || '\x01'::bytea WHERE id = $1`
		args = []any{1 + w.rnd.IntN(30)}
	case k < 84:
		sql = `UPDATE app.blobs SET big = md5(big) || big WHERE id = $1`
		args = []any{1 + w.rnd.IntN(30)}
	case k < 92: // the primary key changes
		sql = `UPDATE app."Keyed Table" SET "K" = md5("K"), v = v + 1 WHERE "K" = (SELECT "K" FROM app."Keyed Table" ORDER BY "K" OFFSET $1 LIMIT 1)`
		args = []any{w.rnd.IntN(100)}
	case k < 99:
		sql = `INSERT INTO app.scratch VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = excluded.v`
		args = []any{w.rnd.IntN(1000), fmt.Sprint(w.steps)}
	default:
		sql = `TRUNCATE app.scratch`
	}
	_, err := tx.Exec(ctx, sql, args...)
	return err
}
