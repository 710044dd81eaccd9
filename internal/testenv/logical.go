package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// logicalClusters are the clusters LogicalCluster and LogicalPasswordCluster return: one each
// per test binary, started on first use and stopped with every other cluster by pgtest.Main.
var logicalClusters [2]struct {
	once sync.Once
	c    *pgcluster.Cluster
	err  error
}

// LogicalCluster returns a cluster with wal_level=logical, for tests that replicate between
// nodes (the shared cluster runs wal_level=replica, and changing it needs a restart). All the
// tests of a binary share it, each in databases of its own (see Database): they must not stop,
// kill or reconfigure it. Local connections are trusted.
func LogicalCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	return logicalCluster(t, false)
}

// LogicalPasswordCluster is LogicalCluster where every role but the superuser logs in with a
// password, from the test's pgpass file (create roles with pgtest.CreateLoginRole): for tests
// that show a worker finds an owner's password where it should.
func LogicalPasswordCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	return logicalCluster(t, true)
}

func logicalCluster(t testing.TB, passwords bool) *pgcluster.Cluster {
	l := &logicalClusters[0]
	if passwords {
		l = &logicalClusters[1]
	}
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		l.c, l.err = pgcluster.Start(ctx, pgcluster.Options{PasswordAuth: passwords, Settings: map[string]string{
			"wal_level":                         "logical",
			"max_replication_slots":             "64",
			"max_wal_senders":                   "64",
			"max_logical_replication_workers":   "24",
			"max_worker_processes":              "40",
			"max_sync_workers_per_subscription": "2",
			// Keepalives let a move see the subscriber caught up without waiting for traffic.
			"wal_sender_timeout":           "10s",
			"wal_receiver_status_interval": "1s",
		}})
	})
	if l.err != nil {
		t.Fatalf("starting the logical cluster: %v", l.err)
	}
	return l.c
}

var dbSeq atomic.Int64

// Database creates a database named after prefix on cluster c, dropped when the test ends.
// Subscriptions and replication slots a failed test left behind are removed first, as they
// would block DROP DATABASE.
func Database(t testing.TB, c *pgcluster.Cluster, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), dbSeq.Add(1))
	if err := c.CreateDatabase(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.Exec(ctx, name, `DO $$ DECLARE s record; BEGIN
			FOR s IN SELECT subname FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) LOOP
				EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', s.subname);
				EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', s.subname);
				EXECUTE format('DROP SUBSCRIPTION %I', s.subname);
			END LOOP; END $$`)
		_ = c.Exec(ctx, "postgres", `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, name)
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	return name
}
