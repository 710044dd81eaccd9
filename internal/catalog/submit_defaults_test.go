package catalog_test

import (
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/catalog"
)

// A task's max_attempts, timeout and transaction reach its row whatever they are: the
// submission leaves out of its JSON those equal to deckhand.submit_job's defaults, and the
// function fills in the same values.
func TestSubmittedTasksKeepTheirAttemptsTimeoutAndTransaction(t *testing.T) {
	cat := migratedCatalog(t)
	want := []catalog.NewTask{
		{Name: "defaults", Kind: "noop", MaxAttempts: 3, Timeout: time.Hour, InTransaction: true},
		{Name: "others", Kind: "noop", MaxAttempts: 5, Timeout: 2 * time.Hour, InTransaction: false},
		{Name: "short", Kind: "noop", MaxAttempts: 1, Timeout: 90 * time.Second, InTransaction: true},
		{Name: "one-off", Kind: "noop", MaxAttempts: 3, Timeout: time.Hour + time.Millisecond, InTransaction: false},
	}
	id, err := cat.InsertJob(ctx, catalog.NewJob{Description: "defaults", Kind: "noop", Tasks: want})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := cat.Pool.Query(ctx, `SELECT name, max_attempts, (extract(epoch FROM timeout) * 1000)::bigint, in_transaction
		FROM deckhand.task WHERE job_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for ; rows.Next(); i++ {
		var (
			name          string
			attempts      int
			timeoutMS     int64
			inTransaction bool
		)
		if err := rows.Scan(&name, &attempts, &timeoutMS, &inTransaction); err != nil {
			t.Fatal(err)
		}
		if i >= len(want) {
			t.Fatalf("task %s beyond the %d submitted", name, len(want))
		}
		w := want[i]
		if name != w.Name || attempts != w.MaxAttempts || timeoutMS != w.Timeout.Milliseconds() || inTransaction != w.InTransaction {
			t.Errorf("task %s: max_attempts %d, timeout %d ms, in_transaction %v; want %s: %d, %d ms, %v",
				name, attempts, timeoutMS, inTransaction, w.Name, w.MaxAttempts, w.Timeout.Milliseconds(), w.InTransaction)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(want) {
		t.Fatalf("%d tasks written, want %d", i, len(want))
	}
}
