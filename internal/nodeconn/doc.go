// Package nodeconn is how deckhand reaches its nodes, in one place:
//
//   - conninfo: both forms read as libpq reads them, secrets refused in every spelling, the
//     user or database changed, secrets hidden for display (CheckConninfo, WithUser,
//     WithDBName, Redact);
//   - pools of sessions per (node, role), each starting with search_path pg_catalog, pg_temp,
//     so that nothing an owner created can stand in for what deckhand itself runs;
//   - owner sessions: OwnerConn returns a session logged in as a task's owner only once the
//     node itself confirmed that the job's submitter is a member of that role, and Session and
//     TaskSession prepare it for an attempt; TaskTransaction runs a transactional task's SQL
//     in the round trip of that check and set-up, which then fails with an error that stops
//     the rest of the query string;
//   - names read as PostgreSQL reads them and resolved with a job's search_path;
//   - backends: the application_name of an attempt, terminating it, probing a node's role,
//     and which names a node holds (Held; both as the user the node's conninfo names).
//
// Every built-in kind and the cleaner reach nodes through this package, with one exception:
// a move also opens a replication connection and runs pg_dump and pg_restore itself, logged in
// as the owner with the node's conninfo (WithUser), after an owner session of the same attempt
// passed OwnerConn's check.
package nodeconn
