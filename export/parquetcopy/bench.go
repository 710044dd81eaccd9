package parquetcopy

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BenchTable (re)creates table (in the connection's search_path) with the export benchmark's
// mixed-type columns, fills it with rows generated rows and runs VACUUM ANALYZE, so that the
// heap is all-visible and sized. The columns are: id bigint NOT NULL, created_at timestamptz
// NOT NULL, qty integer (every 10th NULL), note text (60 characters), payload jsonb (45 bytes
// stored, 33 as text), amount numeric(12,2). A row takes about 167 bytes of heap, so
// 2,000,000 rows make a heap of about 335 MB.
func BenchTable(ctx context.Context, conn *pgconn.PgConn, table string, rows int) error {
	name := pgx.Identifier{table}.Sanitize()
	stmts := []string{
		"DROP TABLE IF EXISTS " + name,
		"CREATE TABLE " + name + ` (
			id bigint NOT NULL,
			created_at timestamptz NOT NULL,
			qty integer,
			note text,
			payload jsonb,
			amount numeric(12,2)
		)`,
		fmt.Sprintf(`INSERT INTO %s
			SELECT g,
				timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
				CASE WHEN g %% 10 = 0 THEN NULL ELSE (g %% 1000)::int END,
				md5(g::text) || substr(md5((g + 1)::text), 1, 28),
				jsonb_build_object('n', g %% 1000, 'tag', substr(md5(g::text), 1, 12)),
				((g * 7919) %% 100000000)::numeric / 100
			FROM generate_series(1::bigint, %d) g`, name, rows),
		"VACUUM (ANALYZE) " + name,
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s).ReadAll(); err != nil {
			return fmt.Errorf("bench table %s: %w", name, err)
		}
	}
	return nil
}
