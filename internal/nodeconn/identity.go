package nodeconn

import (
	"context"
	"fmt"
	"time"
)

// Identity is what a running PostgreSQL server says it is, whatever conninfo reached it (a
// host name or an address, a socket, a proxy). A standby shares its primary's system
// identifier (it is a copy of it) but was started at another moment: the two together tell
// one running server from every other.
type Identity struct {
	// SystemIdentifier is pg_control_system()'s, 0 when the user may not execute it (it is
	// PUBLIC by default).
	SystemIdentifier int64
	// Started is pg_postmaster_start_time(), to the microsecond.
	Started time.Time
}

// Same reports whether a and b are one running server: started at the same microsecond, and
// with the same system identifier where both could read it.
func (a Identity) Same(b Identity) bool {
	if !a.Started.Equal(b.Started) {
		return false
	}
	return a.SystemIdentifier == 0 || b.SystemIdentifier == 0 || a.SystemIdentifier == b.SystemIdentifier
}

// String names the server in a message: "system identifier 7…, running since …".
func (a Identity) String() string {
	s := "running since " + a.Started.UTC().Format("2006-01-02 15:04:05.000000 UTC")
	if a.SystemIdentifier != 0 {
		s = fmt.Sprintf("system identifier %d, %s", a.SystemIdentifier, s)
	}
	return s
}

// identifySQL reads the server's identity, the system identifier only where the user may
// execute pg_control_system (as serverHistorySQL does), so that a server that revoked it is
// still told apart by its start time.
const identifySQL = `
	SELECT COALESCE(CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()'::pg_catalog.text, 'EXECUTE'::pg_catalog.text)
			THEN (pg_catalog.pg_control_system()).system_identifier END, 0::pg_catalog.int8),
		pg_catalog.pg_postmaster_start_time()`

// IdentifyTimeout bounds Identify: node add asks every member of the group, and a member that
// does not answer must not hold the command long.
const IdentifyTimeout = 5 * time.Second

// Identify asks the server at dsn who it is, as the user the conninfo names (as Probe asks),
// within IdentifyTimeout.
func Identify(ctx context.Context, dsn string) (Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, IdentifyTimeout)
	defer cancel()
	conn, err := ConnectToCheck(ctx, dsn)
	if err != nil {
		return Identity{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	var id Identity
	if err := conn.QueryRow(ctx, identifySQL).Scan(&id.SystemIdentifier, &id.Started); err != nil {
		return Identity{}, fmt.Errorf("ask the server who it is: %w", err)
	}
	return id, nil
}

// SameServer asks each of the servers at dsns who it is and returns the first two (by
// position) that are one server, and its identity; ok is false when no two are, or could not
// be told (a server that does not answer is left out).
func SameServer(ctx context.Context, dsns []string) (i, j int, id Identity, ok bool) {
	ids := make([]*Identity, len(dsns))
	for k, dsn := range dsns {
		if got, err := Identify(ctx, dsn); err == nil {
			ids[k] = &got
		}
	}
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[i] != nil && ids[j] != nil && ids[i].Same(*ids[j]) {
				return i, j, *ids[i], true
			}
		}
	}
	return 0, 0, Identity{}, false
}
