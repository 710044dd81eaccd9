package move

import (
	"context"
	"fmt"
	"time"

	"github.com/deckhandhq/deckhand/cleanup"
	"github.com/deckhandhq/deckhand/internal/catalog"
)

// awaitOldCopies waits until the cleaner has dropped, on the target node, what an earlier
// move that ended left there to be dropped: the old copy of the schema or of tables this move
// would create, as when a job moves a schema away and back, the second move starting while the
// first one's source waits for the cleaner. Without the wait the target check would refuse the
// move for a name that is about to go. A name held by a live operation, or not registered
// for removal at all, is left to that check.
func awaitOldCopies(ctx context.Context, cat *catalog.Catalog, node string, p Payload, pl *plan, log func(string)) error {
	var resources []cleanup.Resource
	if p.Schema != "" {
		resources = append(resources, cleanup.SchemaCascade(node, p.Schema))
	} else {
		for _, r := range pl.tables {
			resources = append(resources, cleanup.Table(node, r.Schema, r.Name))
		}
	}
	logged := false
	for _, r := range resources {
		for {
			rec, err := cat.LiveCleanupOf(ctx, r)
			if err != nil {
				return err
			}
			if rec == nil || rec.OperationLive {
				break
			}
			if !logged {
				log(fmt.Sprintf("waiting for the cleaner to drop the old copy on node %s (cleanup record %d)", node, rec.RecordID))
				logged = true
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
