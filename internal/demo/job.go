package demo

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"text/template"

	"github.com/deckhandhq/deckhand/spec"
)

// jobYAML is the demo's job, kept as a spec file so that it reads like (and can be copied as)
// any other job spec rather than as Go code building one.
//
//go:embed job.yaml
var jobYAML string

// jobTemplate fills in job.yaml with text/template. A template, rather than editing the parsed
// spec, because the options change the job's shape (one set of tasks per node), not only its
// values, and a `range` over the nodes in the file shows that plainly. Every value goes in
// through a function quoting it for where it lands, so that no option can change the structure
// of the spec or of its SQL:
//
//   - quote: a YAML string (written as JSON, whose strings YAML reads as double-quoted scalars);
//     its arguments are joined, so {{quote . "/tables"}} is the task name "eu/tables";
//   - literal: an SQL string literal;
//   - ident: an SQL identifier, which must be plain (lower case, digits, '_') to go in unquoted.
//
// Numbers go in as they are.
var jobTemplate = template.Must(template.New("job.yaml").Funcs(template.FuncMap{
	"quote":   quoteYAML,
	"literal": func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" },
	"ident":   plainIdent,
	"join":    strings.Join,
}).Parse(jobYAML))

// jobParams are the values job.yaml leaves open.
type jobParams struct {
	Nodes     []string // the first also runs the report
	Owner     string
	Schema    string
	Rows      int // orders per node
	Customers int // customers per node
}

// buildJob renders job.yaml for opts (with defaults applied) and parses it as any user's spec
// is parsed. Submitting validates it.
func buildJob(opts Options) (*spec.Job, error) {
	doc, err := renderJob(opts)
	if err != nil {
		return nil, err
	}
	return spec.Parse(doc)
}

// renderJob fills in job.yaml for opts (with defaults applied).
func renderJob(opts Options) ([]byte, error) {
	var doc bytes.Buffer
	err := jobTemplate.Execute(&doc, jobParams{
		Nodes: opts.Nodes, Owner: opts.Owner, Schema: Schema, Rows: opts.Rows, Customers: opts.customers(),
	})
	return doc.Bytes(), err
}

func quoteYAML(parts ...string) (string, error) {
	b, err := json.Marshal(strings.Join(parts, ""))
	return string(b), err
}

var plainIdentRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func plainIdent(name string) (string, error) {
	if !plainIdentRE.MatchString(name) {
		return "", fmt.Errorf("%q is not a plain SQL identifier", name)
	}
	return name, nil
}
