package nodeconn

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// CheckTimeout bounds the checks a submission makes on one node, connect included: callers
// run them under a context with this timeout, so that a node that stops answering (a network
// partition, a hung server) fails the submission instead of holding it for ever.
var CheckTimeout = 30 * time.Second

// ConnectToCheck connects to a node with its registered conninfo, for the checks a submission
// makes there before anything is written (the owner role, the relation an export reads), with
// only pg_catalog on the search_path. The caller closes the connection, and bounds ctx by
// CheckTimeout for the connect and the queries.
func ConnectToCheck(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("node conninfo cannot be parsed")
	}
	cfg.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}
