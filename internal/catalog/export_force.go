package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ForceRefusedBy is the export at the destination of forced export exportID that the forced
// export's submitter may not replace, or 0. deckhand.refuse_foreign_force (0022) applies the
// rule when the forced export is submitted; but an export that holds nothing then (failed, or
// cancelled) may be retried by its submitter and commit there again while the forced one
// waits (paused by its own submitter): the coordinator asks again before it writes its
// manifest. The rule is the trigger's, for the forced export's submitter rather than the
// session's: an export committed there, or under way in a job that has not failed nor been
// cancelled, that the submitter may not act on (it is not its submitter nor a member of
// every role it ran as), unless the submitter is an admin.
func (c *Catalog) ForceRefusedBy(ctx context.Context, exportID int64) (int64, error) {
	var other int64
	err := c.Pool.QueryRow(ctx, `
		WITH h AS (
			SELECT x.id, x.destination, j.submitted_by AS who,
			       (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = j.submitted_by) AS who_oid
			FROM deckhand.export x JOIN deckhand.job j ON j.id = x.job_id
			WHERE x.id = $1
		), admin AS (
			SELECT h.who_oid IS NOT NULL AND (pg_catalog.pg_has_role(h.who_oid, 'deckhand_admin'::pg_catalog.name, 'MEMBER'::pg_catalog.text)
			       OR EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = 'deckhand' AND n.nspowner = h.who_oid)) AS yes
			FROM h
		)
		SELECT e.id
		FROM h, admin, deckhand.export e JOIN deckhand.job j ON j.id = e.job_id
		WHERE NOT admin.yes AND e.destination = h.destination AND e.id <> h.id
		  AND (e.state = 'committed'
		       OR (e.state IN ('planning', 'running') AND j.state NOT IN ('failed', 'failing', 'cancelled', 'cancelling')))
		  AND j.submitted_by <> h.who
		  AND NOT (h.who_oid IS NOT NULL AND pg_catalog.cardinality(j.owners) > 0 AND NOT EXISTS (
		          SELECT 1 FROM pg_catalog.unnest(j.owners) o(name)
		          WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
		                            WHERE r.rolname = o.name AND pg_catalog.pg_has_role(h.who_oid, r.oid, 'MEMBER'::pg_catalog.text))))
		ORDER BY e.id DESC LIMIT 1`, exportID).Scan(&other)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("check the destination of forced export %d: %w", exportID, err)
	}
	return other, nil
}
