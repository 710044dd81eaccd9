package nodeconn

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConnectToCheck connects to a node with its registered conninfo, for the checks a submission
// makes there before anything is written (the owner role, the relation an export reads), with
// only pg_catalog on the search_path. The caller closes the connection.
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
