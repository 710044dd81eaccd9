package engine

import (
	"context"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// The Client's reads go through the catalog's views, so each caller sees what its catalog
// role may act on (docs/security.md); admins and workers see everything.

// Jobs lists jobs newest first.
func (c *Client) Jobs(ctx context.Context, f deckhandtype.JobFilter) ([]deckhandtype.Job, error) {
	return c.cat.Jobs(ctx, f)
}

// JobRow reads one job without its tasks (see Job for the whole of it).
func (c *Client) JobRow(ctx context.Context, id int64) (deckhandtype.Job, error) {
	return c.cat.Job(ctx, id)
}

// Nodes lists the registered nodes by name.
func (c *Client) Nodes(ctx context.Context) ([]deckhandtype.Node, error) { return c.cat.Nodes(ctx) }

// RemoveNode unregisters a node (admins only).
func (c *Client) RemoveNode(ctx context.Context, name string) error {
	return c.cat.RemoveNode(ctx, name)
}

// Workers lists workers that are alive (and, with includeStopped, stopped ones), newest first.
func (c *Client) Workers(ctx context.Context, includeStopped bool) ([]deckhandtype.Worker, error) {
	return c.cat.Workers(ctx, includeStopped)
}

// Leader is the leading worker's id, 0 when none leads.
func (c *Client) Leader(ctx context.Context) (int64, error) { return c.cat.Leader(ctx) }

// Exports lists the newest exports.
func (c *Client) Exports(ctx context.Context, limit int) ([]deckhandtype.Export, error) {
	return c.cat.Exports(ctx, limit)
}

// Export reads one export.
func (c *Client) Export(ctx context.Context, id int64) (*deckhandtype.Export, error) {
	return c.cat.Export(ctx, id)
}

// CleanupRecords lists cleanup records, newest first.
func (c *Client) CleanupRecords(ctx context.Context, f deckhandtype.CleanupFilter) ([]deckhandtype.CleanupRecord, error) {
	return c.cat.CleanupRecords(ctx, f)
}

// RetryCleanupRecord makes a failed or node_removed record due again (admins only).
func (c *Client) RetryCleanupRecord(ctx context.Context, id int64) error {
	return c.cat.RetryCleanupRecord(ctx, id)
}

// ForgetCleanupRecord gives up on a record (admins only).
func (c *Client) ForgetCleanupRecord(ctx context.Context, id int64) error {
	return c.cat.ForgetCleanupRecord(ctx, id)
}

// Pins lists pins on resources.
func (c *Client) Pins(ctx context.Context) ([]deckhandtype.Pin, error) { return c.cat.Pins(ctx) }

// Pin keeps a resource alive until Unpin (admins only): the cleaner and drops refuse it.
func (c *Client) Pin(ctx context.Context, r deckhandtype.CleanupResource, reason string) (int64, error) {
	return c.cat.PinResource(ctx, r, 0, reason)
}

// Unpin removes a pin (admins only).
func (c *Client) Unpin(ctx context.Context, id int64) error { return c.cat.UnpinResource(ctx, id) }

// Settings lists the catalog-wide settings that are set (admins).
func (c *Client) Settings(ctx context.Context) (map[string]string, error) { return c.cat.Settings(ctx) }

// SetSetting sets a catalog-wide setting; an empty value goes back to the default (admins only).
func (c *Client) SetSetting(ctx context.Context, name, value string) error {
	return c.cat.SetSetting(ctx, name, value)
}

// Stats counts jobs, tasks, workers, cleanup backlog and export volume across the catalog.
func (c *Client) Stats(ctx context.Context) (deckhandtype.Stats, error) { return c.cat.Stats(ctx) }

// Progress reads how far the running statements of a job's tasks have got, for those that
// report it (CREATE INDEX, VACUUM, ANALYZE, CLUSTER, COPY): at most 100 tasks, by id.
func (c *Client) Progress(ctx context.Context, jobID int64) ([]deckhandtype.NamedProgress, error) {
	return c.cat.JobProgress(ctx, jobID)
}
