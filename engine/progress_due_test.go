package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// Only tasks that have run a sampling interval have their progress read: a worker of short
// tasks spread over many nodes would otherwise open a session on every one of them each
// interval. Every running attempt is still known as running, so that the samples of those
// that ended are dropped and those of young ones kept.
func TestProgressIsReadOnlyForTasksThatRanAnInterval(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	node, dsn := "n1", "host=/nonexistent"
	task := func(id int64, began time.Duration, onNode bool) *runningTask {
		c := &deckhandtype.ClaimedTask{ID: id, Token: id * 10, Owner: "app"}
		if onNode {
			c.Node, c.NodeDSN = &node, &dsn
		}
		return &runningTask{token: c.Token, task: c, began: now.Add(-began)}
	}
	running := map[int64]*runningTask{
		1: task(1, 5*time.Second, true),        // long under way
		2: task(2, time.Second, true),          // exactly one interval
		3: task(3, 999*time.Millisecond, true), // not yet
		4: task(4, 0, true),                    // just claimed
		5: task(5, time.Minute, false),         // runs on no node (a noop)
	}
	groups, all := progressDue(running, now.Add(-time.Second))
	var sampled []int64
	for _, tasks := range groups {
		for _, c := range tasks {
			sampled = append(sampled, c.ID)
		}
	}
	if len(groups) != 1 || len(sampled) != 2 || !slices.Contains(sampled, 1) || !slices.Contains(sampled, 2) {
		t.Errorf("sampled %v in %d group(s), want tasks 1 and 2 in one", sampled, len(groups))
	}
	for _, id := range []int64{1, 2, 3, 4} {
		if !all[attempt{id, id * 10}] {
			t.Errorf("task %d is not known as running", id)
		}
	}
	if len(all) != 4 {
		t.Errorf("%d attempts known as running, want 4 (the noop has no progress)", len(all))
	}
}
