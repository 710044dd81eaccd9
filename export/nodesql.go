package export

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/deckhandtype"
	"github.com/deckhandhq/deckhand/internal/catalog"
	"github.com/deckhandhq/deckhand/internal/taskerr"
)

// The SQL an export sends to its nodes runs in the owner's session, where the owner may have
// created functions, operators and types of its own. Every function named is pg_catalog's,
// with exact argument types. Statements that may run before the search_path is pinned (the
// lookups below, waitForReplay) name pg_catalog's operators too; the others run only after
// pinSearchPathSQL, which leaves no schema but pg_catalog to find an operator in.

// pinSearchPathSQL leaves the session's search_path to pg_catalog alone (pg_temp is never
// searched for functions or operators), for the statements that follow; is_local $1.
const pinSearchPathSQL = `SELECT pg_catalog.set_config('search_path'::pg_catalog.text, 'pg_catalog, pg_temp'::pg_catalog.text, $1::pg_catalog.bool)`

// relationByOIDSQL names the relation an OID is, with its kind.
const relationByOIDSQL = `
	SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, c.relkind::pg_catalog.text
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
	WHERE c.oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid`

// relationByNameSQL finds a relation by schema and name, without search_path.
const relationByNameSQL = `
	SELECT c.oid, c.relkind::pg_catalog.text
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
	WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.name`

// isAncestorSQL: $2 is a partition ancestor of $1 (other than $1 itself).
const isAncestorSQL = `
	SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_partition_ancestors($1::pg_catalog.oid::pg_catalog.regclass) a
	               WHERE a.relid::pg_catalog.oid OPERATOR(pg_catalog.=) $2::pg_catalog.oid
	                 AND a.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) $1::pg_catalog.oid)`

const setLockTimeoutSQL = `SELECT pg_catalog.set_config('lock_timeout'::pg_catalog.text, $1::pg_catalog.text, true)`

// pointSQL reads the consistency point and the size of relation $1 in pages, under the lock,
// and the name of the point's WAL file, whose first digits are the primary's timeline.
// The point is the end of the last WAL record inserted: every commit before the lock is at or
// before it. When that record ended a page, the insert position already points past the next
// page's header, which no standby ever reports as replayed: step back over it.
const pointSQL = `
	WITH p AS (
		SELECT pg_catalog.pg_current_wal_insert_lsn() AS lsn,
		       pg_catalog.current_setting('wal_block_size'::pg_catalog.text)::pg_catalog.numeric AS block,
		       (SELECT s.setting::pg_catalog.numeric * 1024 * 1024 FROM pg_catalog.pg_settings s
		        WHERE s.name = 'wal_segment_size' AND s.unit = 'MB'
		        UNION ALL
		        SELECT s.setting::pg_catalog.numeric FROM pg_catalog.pg_settings s
		        WHERE s.name = 'wal_segment_size' AND s.unit = 'B') AS segment
	)
	SELECT (CASE WHEN (lsn - '0/0'::pg_catalog.pg_lsn) % segment = 40 THEN lsn - 40::pg_catalog.numeric
	             WHEN (lsn - '0/0'::pg_catalog.pg_lsn) % block = 24 THEN lsn - 24::pg_catalog.numeric
	             ELSE lsn END)::pg_catalog.text,
	       pg_catalog.pg_relation_size($1::pg_catalog.oid::pg_catalog.regclass)
	           / pg_catalog.current_setting('block_size'::pg_catalog.text)::pg_catalog.int8,
	       pg_catalog.pg_walfile_name(p.lsn)
	FROM p`

// untrustedPolicySQL: row security of relation $1 applies to the session user, and the code its
// policies run as the session user may be written by a role that is not a member of it: the
// table's owner (who decides the policies), or the owner of a function, operator or relation a
// policy names.
const untrustedPolicySQL = `
	SELECT pg_catalog.row_security_active($1::pg_catalog.oid::pg_catalog.regclass) AND (
		NOT pg_catalog.pg_has_role(c.relowner, SESSION_USER, 'MEMBER'::pg_catalog.text)
		OR EXISTS (
			SELECT 1 FROM pg_catalog.pg_policy p
			JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_policy'::pg_catalog.regclass
			     AND d.objid OPERATOR(pg_catalog.=) p.oid
			LEFT JOIN pg_catalog.pg_proc f ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
			     AND f.oid OPERATOR(pg_catalog.=) d.refobjid
			LEFT JOIN pg_catalog.pg_operator o ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass
			     AND o.oid OPERATOR(pg_catalog.=) d.refobjid
			LEFT JOIN pg_catalog.pg_proc oc ON oc.oid OPERATOR(pg_catalog.=) o.oprcode
			LEFT JOIN pg_catalog.pg_class r ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
			     AND r.oid OPERATOR(pg_catalog.=) d.refobjid
			WHERE p.polrelid OPERATOR(pg_catalog.=) $1::pg_catalog.oid
			  AND EXISTS (SELECT 1 FROM (VALUES (f.proowner), (o.oprowner), (oc.proowner), (r.relowner)) AS w(owner)
			              WHERE w.owner IS NOT NULL
			                AND NOT pg_catalog.pg_has_role(w.owner, SESSION_USER, 'MEMBER'::pg_catalog.text))))
	FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid`

const versionSQL = `SELECT pg_catalog.current_setting('server_version_num'::pg_catalog.text)::pg_catalog.int4`

// lookupName resolves schema.name on the node; ok is false when no such relation exists.
func lookupName(ctx context.Context, conn *pgx.Conn, id pgx.Identifier) (oid uint32, kind string, ok bool, err error) {
	err = conn.QueryRow(ctx, relationByNameSQL, id[0], id[1]).Scan(&oid, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", false, nil
	}
	return oid, kind, err == nil, err
}

// sameRelation checks that rel.OID still names rel.Schema.rel.Name, a table, on this node:
// between the coordinator's attempts, and on every member that reads a part (physical
// standbys share the primary's OIDs).
func sameRelation(ctx context.Context, conn *pgx.Conn, rel catalog.ExportRelation, node string) error {
	var schema, name, kind string
	err := conn.QueryRow(ctx, relationByOIDSQL, rel.OID).Scan(&schema, &name, &kind)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (schema != rel.Schema || name != rel.Name || kind != "r")) {
		return taskerr.Permanent(fmt.Errorf("on node %s, %s is no longer the table exported (OID %d): it was dropped, renamed or replaced during the export",
			node, rel.Identifier().Sanitize(), rel.OID))
	}
	return err
}

// resolveRelation finds the leaf an export reads and checks it: a leaf partition of the table
// (or the plain table itself), readable by the owner, on PostgreSQL 14 or later (TID range
// scans). The first attempt resolves the name; later ones check the OID it recorded.
func resolveRelation(ctx context.Context, conn *pgx.Conn, e *deckhandtype.Export, recorded *catalog.ExportRelation, node string) (catalog.ExportRelation, error) {
	var version int
	if err := conn.QueryRow(ctx, versionSQL).Scan(&version); err != nil {
		return catalog.ExportRelation{}, err
	}
	if version < 140000 {
		return catalog.ExportRelation{}, taskerr.Permanent(fmt.Errorf("export needs PostgreSQL 14 or later (TID range scans); the primary runs %d", version))
	}
	partition, err := qualifiedName(e.Partition)
	if err != nil {
		return catalog.ExportRelation{}, taskerr.Permanent(fmt.Errorf("partition: %w", err))
	}
	rel := catalog.ExportRelation{Schema: partition[0], Name: partition[1]}
	var kind string
	if recorded != nil {
		rel = *recorded
		kind = "r"
		if err := sameRelation(ctx, conn, rel, node); err != nil {
			return rel, err
		}
	} else {
		var ok bool
		if rel.OID, kind, ok, err = lookupName(ctx, conn, partition); err != nil {
			return rel, err
		} else if !ok {
			return rel, taskerr.Permanent(fmt.Errorf("relation %s does not exist on node %s", e.Partition, node))
		}
	}
	if problem, err := leafProblem(ctx, conn, e.SourceTable, e.Partition, rel.OID, kind, node); err != nil {
		return rel, err
	} else if problem != "" {
		return rel, taskerr.Permanent(errors.New(problem))
	}
	// Before anything reads it, since planning may already call a policy's functions.
	var untrusted bool
	if err := conn.QueryRow(ctx, untrustedPolicySQL, rel.OID).Scan(&untrusted); err != nil {
		return rel, err
	}
	if untrusted {
		return rel, taskerr.Permanent(fmt.Errorf("row security of %s applies to the export's owner, and its policies are "+
			"controlled by, or call code of, a role that is not a member of the owner: the export would run that code as the owner", e.Partition))
	}
	// PostgreSQL's own words when the owner may not read the partition.
	if _, err := conn.Exec(ctx, "SELECT FROM ONLY "+rel.Identifier().Sanitize()+" LIMIT 0"); err != nil {
		return rel, taskerr.Permanent(err)
	}
	return rel, nil
}

// leafProblem says why the relation partition (OID relOID, of kind relkind) is not what an
// export of source reads — a leaf partition of source, or the plain table source itself —,
// in words for the user, or "" when it is. Both names are in canonical spelling.
func leafProblem(ctx context.Context, conn *pgx.Conn, source, partition string, relOID uint32, relkind, node string) (string, error) {
	sourceID, err := qualifiedName(source)
	if err != nil {
		return "table: " + err.Error(), nil
	}
	sourceOID, sourceKind, ok, err := lookupName(ctx, conn, sourceID)
	if err != nil {
		return "", err
	}
	if !ok {
		return fmt.Sprintf("relation %s does not exist on node %s", source, node), nil
	}
	switch {
	case sourceOID == relOID && relkind == "r":
		return "", nil
	case sourceOID == relOID && relkind == "p":
		return fmt.Sprintf("%s is partitioned: name a leaf partition with --partition", source), nil
	case relkind == "p":
		return fmt.Sprintf("%s is not a leaf partition (it is partitioned itself)", partition), nil
	case relkind != "r":
		return fmt.Sprintf("%s is not a table", partition), nil
	case sourceKind != "p":
		return fmt.Sprintf("%s is not a partition of %s", partition, source), nil
	}
	var isLeaf bool
	if err := conn.QueryRow(ctx, isAncestorSQL, relOID, sourceOID).Scan(&isLeaf); err != nil {
		return "", err
	}
	if !isLeaf {
		return fmt.Sprintf("%s is not a partition of %s", partition, source), nil
	}
	return "", nil
}
