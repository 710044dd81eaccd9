package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// result is what verify read back from the nodes.
type result struct {
	nodes      []nodeResult // in Options.Nodes order
	reportNode string       // the first node, which ran the report
	reportRows int64
	top        string // the report's first row: "customer 8877 with 4152.54"
}

type nodeResult struct {
	name              string
	orders, customers int64
}

// verify reads the result back from every node, connected as the owner, and checks it: the row
// counts, the tables' owner, a valid index, statistics, and the report on the first node.
func (r *runner) verify(ctx context.Context) (*result, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	res := &result{}
	for i, n := range r.nodes {
		cfg, err := pgx.ParseConfig(n.DSN)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		cfg.User = r.opts.Owner
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to node %s as %s: %w", n.Name, r.opts.Owner, err)
		}
		var orders, customers int64
		var owner string
		var indexValid, analyzed bool
		err = conn.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM `+Schema+`.orders), (SELECT count(*) FROM `+Schema+`.customers),
				pg_get_userbyid((SELECT relowner FROM pg_class WHERE oid = '`+Schema+`.orders'::regclass)),
				coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('`+Schema+`.orders_customer_id_idx')), false),
				EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = '`+Schema+`' AND tablename = 'orders')`).
			Scan(&orders, &customers, &owner, &indexValid, &analyzed)
		if err == nil && i == 0 {
			var rows int64
			var top *string
			err = conn.QueryRow(ctx, `SELECT count(*), (SELECT name || ' with ' || revenue FROM `+Schema+`.top_customers
				ORDER BY revenue DESC, id LIMIT 1) FROM `+Schema+`.top_customers`).Scan(&rows, &top)
			if err == nil {
				if rows == 0 || top == nil {
					err = errors.New("the report table is empty")
				} else {
					res.reportNode, res.reportRows, res.top = n.Name, rows, *top
				}
			}
		}
		conn.Close(context.Background()) //nolint:errcheck
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		var problems []string
		if orders != int64(r.opts.Rows) {
			problems = append(problems, fmt.Sprintf("%d orders, want %d", orders, r.opts.Rows))
		}
		if customers != int64(r.opts.customers()) {
			problems = append(problems, fmt.Sprintf("%d customers, want %d", customers, r.opts.customers()))
		}
		if owner != r.opts.Owner {
			problems = append(problems, fmt.Sprintf("orders owned by %s, want %s", owner, r.opts.Owner))
		}
		if !indexValid {
			problems = append(problems, "index orders_customer_id_idx missing or invalid")
		}
		if !analyzed {
			problems = append(problems, "no statistics on orders")
		}
		if len(problems) > 0 {
			return nil, fmt.Errorf("node %s: %s", n.Name, strings.Join(problems, "; "))
		}
		res.nodes = append(res.nodes, nodeResult{name: n.Name, orders: orders, customers: customers})
	}
	return res, nil
}
