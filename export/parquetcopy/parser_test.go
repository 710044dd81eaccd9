package parquetcopy

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
	"github.com/deckhandhq/deckhand/internal/pgtest"
)

// recordStream records the COPY binary stream of a table with NULLs, arrays and long values.
func recordStream(t *testing.T) ([]Column, *recorder, int64) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, pgtest.Shared(t).DSN(pgtest.NewDatabase(t), pgcluster.Superuser))
	if _, err := conn.Exec(ctx, `CREATE TABLE s (id bigint NOT NULL, t text, a int[], n numeric, d numeric(20,3), b bytea);
		INSERT INTO s SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE repeat(md5(g::text), g % 50) END,
			CASE WHEN g % 5 = 0 THEN NULL ELSE ARRAY[g, NULL, -g] END, g::numeric / 3, g * 1.125,
			CASE WHEN g % 100 = 0 THEN decode(repeat('ab', CASE WHEN g = 3000 THEN 1100000 ELSE 70000 + g END), 'hex') END
		FROM generate_series(1, 3000) g`); err != nil {
		t.Fatal(err)
	}
	id := pgx.Identifier{"s"}
	cols, err := Columns(ctx, conn.PgConn(), id)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	tag, err := conn.PgConn().CopyTo(ctx, rec, CopySQL(id, cols, 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	return cols, rec, tag.RowsAffected()
}

// TestParserChunking: however the stream is cut into Writes, the file comes out the same.
func TestParserChunking(t *testing.T) {
	cols, rec, rows := recordStream(t)
	opts := Options{RowGroupRows: 1000}
	run := func(feed func(io.Writer) error) Stats {
		t.Helper()
		st, err := write(cols, io.Discard, opts, func(w io.Writer) (int64, error) { return rows, feed(w) })
		if err != nil {
			t.Fatal(err)
		}
		if st.Rows != rows {
			t.Fatalf("%d rows, want %d", st.Rows, rows)
		}
		return st
	}
	want := run(rec.replay)
	whole := run(func(w io.Writer) error { _, err := w.Write(rec.data); return err })
	rnd := rand.New(rand.NewPCG(1, 2))
	random := run(func(w io.Writer) error {
		for b := rec.data; len(b) > 0; {
			n := min(len(b), 1+rnd.IntN(300))
			if _, err := w.Write(b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	})
	small := run(func(w io.Writer) error {
		for b := rec.data[:min(len(rec.data), 200000)]; len(b) > 0; b = b[1:] {
			if _, err := w.Write(b[:1]); err != nil {
				return err
			}
		}
		_, err := w.Write(rec.data[min(len(rec.data), 200000):])
		return err
	})
	for name, st := range map[string]Stats{"whole": whole, "random": random, "bytewise": small} {
		if st != want {
			t.Errorf("%s: %x, want %x", name, st.SHA256, want.SHA256)
		}
	}
}

func TestParserErrors(t *testing.T) {
	cols, rec, rows := recordStream(t)
	for _, tc := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"signature", append([]byte("PGCOPX"), rec.data[6:]...), "bad signature"},
		{"truncated", rec.data[:len(rec.data)-100], "ended without its trailer"},
		{"after trailer", append(append([]byte(nil), rec.data...), 0, 1), "data after its trailer"},
		{"field count", fieldCount(rec.data, 5), "COPY row has 5 fields, expected 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := write(cols, io.Discard, Options{}, func(w io.Writer) (int64, error) {
				_, err := w.Write(tc.stream)
				return rows, err
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	// A row count that does not match what was decoded.
	_, err := write(cols, io.Discard, Options{}, func(w io.Writer) (int64, error) {
		_, err := w.Write(rec.data)
		return rows + 1, err
	})
	if err == nil || !strings.Contains(err.Error(), "reported") {
		t.Fatalf("row count mismatch: %v", err)
	}
}

// fieldCount rewrites the first tuple's field count (just after the 19-byte header).
func fieldCount(stream []byte, n int16) []byte {
	out := bytes.Clone(stream)
	out[19], out[20] = byte(n>>8), byte(n)
	return out
}
