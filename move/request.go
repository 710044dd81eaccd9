package move

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/nodeconn"
	"github.com/deckhandhq/deckhand/spec"
)

// Kind moves a schema, or some tables, online from the primary of one node group to the
// primary of another: structure, a copy under a consistent snapshot, logical catch-up, and a
// cut-over that blocks writes for at most MaxWriteBlock.
const Kind = "move"

// DefaultMaxWriteBlock bounds how long the cut-over blocks writers when the request says nothing.
const DefaultMaxWriteBlock = 2 * time.Second

// Defaults of the task a Request builds: a move is long (a copy of the whole schema), and an
// attempt that dies is rescued and starts over (or resumes), so a few attempts are worth it.
const (
	DefaultTimeout     = 24 * time.Hour
	DefaultMaxAttempts = 3
)

// Request is what `deckhand move` asks for. Exactly one of Schema and Tables is set.
type Request struct {
	Schema        string        // moves the whole schema (and every object in it)
	Tables        []string      // moves these tables ("schema.table" or "table", read as PostgreSQL reads names)
	From, To      string        // node groups: the primary of each is used
	MaxWriteBlock time.Duration // longest time the cut-over blocks writers; 0: DefaultMaxWriteBlock
	Owner         string        // role the move runs as on both nodes; empty: the submitter
	Bytes         int64         // planned size, optional (for plans and progress)
}

// Payload is the payload of a move task. Names are canonical: Schema is the schema's name as
// stored, Tables are [schema, table] pairs.
type Payload struct {
	Schema        string        `json:"schema,omitempty"`
	Tables        [][2]string   `json:"tables,omitempty"`
	From          string        `json:"from"`
	To            string        `json:"to"`
	MaxWriteBlock spec.Duration `json:"max_write_block,omitempty"`
	Bytes         int64         `json:"bytes,omitempty"`
}

// Payload checks r without a database and returns the task payload it asks for; errors are
// one line and are *spec.Error.
func (r Request) Payload() (Payload, error) {
	p := Payload{From: strings.TrimSpace(r.From), To: strings.TrimSpace(r.To),
		MaxWriteBlock: spec.Duration(r.MaxWriteBlock), Bytes: r.Bytes}
	schema := strings.TrimSpace(r.Schema)
	if schema != "" {
		id, err := nodeconn.ParseQualifiedName(schema)
		if err != nil {
			return p, spec.Invalidf("--schema: %v", err)
		}
		if len(id) != 1 {
			return p, spec.Invalidf("--schema %q: a schema name has no dot", schema)
		}
		p.Schema = id[0]
	}
	for _, t := range r.Tables {
		id, err := nodeconn.ParseQualifiedName(t)
		if err != nil {
			return p, spec.Invalidf("--table: %v", err)
		}
		if len(id) == 1 {
			id = pgx.Identifier{"public", id[0]}
		}
		p.Tables = append(p.Tables, [2]string{id[0], id[1]})
	}
	if err := p.check(); err != nil {
		return p, spec.Invalidf("%v", err)
	}
	return p, nil
}

// Task is the task of a job that performs the move; name is the task's name in its job.
// The task names no node: it runs on the primaries the groups have when it starts.
func (r Request) Task(name string) (spec.Task, error) {
	p, err := r.Payload()
	if err != nil {
		return spec.Task{}, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return spec.Task{}, err
	}
	return spec.Task{Name: name, Kind: Kind, Owner: strings.TrimSpace(r.Owner), Payload: raw,
		MaxAttempts: DefaultMaxAttempts, Timeout: spec.Duration(DefaultTimeout)}, nil
}

// Description is a one-line summary of the move, for job descriptions and logs.
func (p Payload) Description() string {
	return fmt.Sprintf("move %s from %s to %s", p.What(), p.From, p.To)
}

// What names what is moved: "schema app" or "tables app.a, app.b".
func (p Payload) What() string {
	if p.Schema != "" {
		return "schema " + displayName(p.Schema)
	}
	names := make([]string, len(p.Tables))
	for i, t := range p.Tables {
		names[i] = displayName(t[0], t[1])
	}
	return "tables " + strings.Join(names, ", ")
}

// ParsePayload reads and checks a move payload.
func ParsePayload(raw json.RawMessage) (Payload, error) {
	var p Payload
	if err := spec.DecodePayload(Kind, raw, &p, `{"schema": "app", "from": "group1", "to": "group2"}`); err != nil {
		return p, err
	}
	if err := p.check(); err != nil {
		return p, fmt.Errorf("%s: %w", Kind, err)
	}
	return p, nil
}

// maxTables bounds a table move's list: each table is one pg_dump argument and one lock.
const maxTables = 1000

// check is what both a Request and a submitted payload must satisfy.
func (p Payload) check() error {
	switch {
	case p.Schema == "" && len(p.Tables) == 0:
		return errors.New("give --schema or --table")
	case p.Schema != "" && len(p.Tables) > 0:
		return errors.New("give --schema or --table, not both")
	case len(p.Tables) > maxTables:
		return fmt.Errorf("at most %d tables per move", maxTables)
	case p.From == "":
		return errors.New("--from is required (a node group)")
	case p.To == "":
		return errors.New("--to is required (a node group)")
	case p.From == p.To:
		return fmt.Errorf("--from and --to are both group %s", p.From)
	case p.Bytes < 0:
		return errors.New("bytes must not be negative")
	}
	for _, n := range append([]string{p.Schema}, flatten(p.Tables)...) {
		if strings.ContainsRune(n, 0) {
			return errors.New("names must not contain NUL bytes")
		}
	}
	if isSystemSchema(p.Schema) {
		return fmt.Errorf("schema %s is PostgreSQL's own and cannot be moved", p.Schema)
	}
	seen := map[[2]string]bool{}
	for _, t := range p.Tables {
		if t[0] == "" || t[1] == "" {
			return errors.New("table names must not be empty")
		}
		if isSystemSchema(t[0]) {
			return fmt.Errorf("table %s is in PostgreSQL's own schema %s", t[1], t[0])
		}
		if seen[t] {
			return fmt.Errorf("table %s is given twice", displayName(t[0], t[1]))
		}
		seen[t] = true
	}
	if p.MaxWriteBlock != 0 {
		if err := spec.CheckTimeout("--max-write-block", p.MaxWriteBlock); err != nil {
			return err
		}
		if time.Duration(p.MaxWriteBlock) < 10*time.Millisecond {
			return errors.New("--max-write-block must be at least 10ms: the cut-over needs a few round trips")
		}
	}
	return nil
}

func flatten(ts [][2]string) []string {
	out := make([]string, 0, 2*len(ts))
	for _, t := range ts {
		out = append(out, t[0], t[1])
	}
	return out
}

func isSystemSchema(s string) bool {
	return slices.Contains([]string{"pg_catalog", "information_schema", "pg_toast"}, s) ||
		strings.HasPrefix(s, "pg_temp") || strings.HasPrefix(s, "pg_toast_temp")
}

// maxWriteBlock is the payload's bound on blocked writes, or the default.
func (p Payload) maxWriteBlock() time.Duration {
	if p.MaxWriteBlock == 0 {
		return DefaultMaxWriteBlock
	}
	return time.Duration(p.MaxWriteBlock)
}
