package cli_test

import "testing"

// A catalog login without any deckhand role is refused as the other missing grants are
// (serve without deckhand_worker, setting set without deckhand_admin): one line naming the
// roles, exit 2. It exited 1, which scripts take for an operation that failed and may retry.
func TestLoginWithoutADeckhandRoleIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := e.Role("nobody")
	for _, args := range [][]string{{"job", "list"}, {"job", "cancel", "1"}, {"schedule", "list", "-o", "json"}} {
		r := deckhand(t, "", append([]string{"--catalog", e.RoleDSN(role)}, args...)...)
		wantUsage(t, r, "permission denied for schema deckhand", "needs deckhand_submitter")
	}
	// Nor is it told only of the roles a submitter needs when it runs a worker.
	for _, args := range [][]string{{"serve"}, {"cleanup", "run"}} {
		r := deckhand(t, "", append([]string{"--catalog", e.RoleDSN(role)}, args...)...)
		wantUsage(t, r, "permission denied for schema deckhand", "deckhand_worker to run deckhand serve")
	}
}
