package nodeconn

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// A consistency point is a WAL position in one history, a timeline: a standby that replays
// another primary's WAL (its upstream promoted while the first primary still ran) reaches the
// same positions with other rows. Timelines say which history a server is on.

// TimelineOfWALFile is the timeline in the name of a WAL segment file (its first 8 hex
// digits), as pg_walfile_name gives it on a primary.
func TimelineOfWALFile(name string) (int32, error) {
	if len(name) < 8 {
		return 0, fmt.Errorf("WAL file name %q", name)
	}
	tli, err := strconv.ParseUint(name[:8], 16, 32)
	if err != nil || tli == 0 {
		return 0, fmt.Errorf("WAL file name %q", name)
	}
	return int32(tli), nil
}

// StandbyTimeline is the timeline whose WAL the standby at dsn receives, asked as the user
// its conninfo names (as Probe asks): what a task's owner sees of pg_stat_wal_receiver is
// hidden without pg_read_all_stats. Without a WAL receiver to ask (replay from an archive
// alone) or the right to read it, it is the timeline of the standby's last restartpoint,
// which may lag behind a switch. Timelines only grow on a standby, so asked after a read it
// bounds the timeline the read was made on.
func StandbyTimeline(ctx context.Context, pools *Pools, dsn string) (int32, error) {
	pool, err := pools.get(ctx, dsn, "")
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var tli int32
	err = pool.QueryRow(ctx, `
		SELECT coalesce((SELECT r.received_tli FROM pg_catalog.pg_stat_wal_receiver r),
		                (SELECT c.timeline_id FROM pg_catalog.pg_control_checkpoint() c))::pg_catalog.int4`).Scan(&tli)
	if err != nil {
		return 0, fmt.Errorf("read the timeline the standby replays: %w", err)
	}
	return tli, nil
}
