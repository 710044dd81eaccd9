package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"

	"github.com/deckhandhq/deckhand/internal/suggest"
)

// Parse reads a job spec written in JSON or YAML. Unknown fields are errors, so a misspelt
// field name is reported rather than silently ignored. Parse only decodes: call Validate
// before using the job.
func Parse(data []byte) (*Job, error) {
	doc, err := toJSON(data)
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		if bytes.Equal(doc, []byte("null")) {
			return nil, Invalidf("spec: empty input")
		}
		return nil, Invalidf("spec: expected a job object with a \"tasks\" list, got %s", jsonKind(doc))
	}
	if err := checkFields(top, jobFields, "job"); err != nil {
		return nil, err
	}
	// Decode the job with its tasks left raw, so that each task's errors can name the task.
	// checkFields has refused every field that is not exactly one of the job's (and every
	// task's, below), which is stricter than DisallowUnknownFields: Unmarshal suffices.
	var raw struct {
		Job
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, decodeError("", err)
	}
	job := raw.Job
	job.Tasks = make([]Task, len(raw.Tasks))
	for i, rt := range raw.Tasks {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(rt, &fields); err != nil || fields == nil {
			return nil, Invalidf("spec: task #%d: expected an object, got %s", i+1, jsonKind(rt))
		}
		label := fmt.Sprintf("task #%d", i+1)
		var name string
		if json.Unmarshal(fields["name"], &name) == nil && name != "" {
			label = fmt.Sprintf("task %q", name)
		}
		if err := checkFields(fields, taskFields, label); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(rt, &job.Tasks[i]); err != nil {
			return nil, decodeError(label+": ", err)
		}
	}
	return &job, nil
}

// toJSON returns data as JSON. Input that looks like JSON is read as JSON, so that syntax
// errors carry a line number; anything else is read as YAML.
func toJSON(data []byte) ([]byte, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // UTF-8 byte order mark
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, Invalidf("spec: empty input")
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		// Validity alone, without building the document: a spec of 100,000 tasks is megabytes.
		if json.Valid(data) {
			return trimmed, nil
		}
		var v any
		jerr := json.Unmarshal(data, &v)
		// Maybe a YAML flow mapping such as {tasks: [...]}; if not, the JSON error is the useful
		// one. JSON followed by more text reads as YAML's first document with the rest
		// dropped: that is a JSON error too. The YAML is converted only once it is known to
		// be one document that its aliases do not blow up.
		switch err := oneDocument(data); {
		case err == nil:
			if doc, err := yaml.YAMLToJSONStrict(data); err == nil {
				return doc, nil
			}
		case isAliasError(err):
			return nil, err
		}
		var se *json.SyntaxError
		if errors.As(jerr, &se) {
			line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			return nil, &Error{Msg: fmt.Sprintf("spec: line %d: %s", line, se.Error()), Err: jerr}
		}
		return nil, &Error{Msg: "spec: " + jerr.Error(), Err: jerr}
	}
	if err := oneDocument(data); err != nil {
		if isAliasError(err) {
			return nil, err
		}
		// A syntax error is told as the conversion tells it, with its line.
		if _, cerr := yaml.YAMLToJSONStrict(data); cerr != nil {
			return nil, &Error{Msg: "spec: " + yamlMessage(cerr), Err: cerr}
		}
		return nil, err
	}
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, &Error{Msg: "spec: " + yamlMessage(err), Err: err}
	}
	return doc, nil
}

// MaxAliasGrowth is how much larger than its text YAML aliases may make a spec. Each alias
// of an anchored node repeats the whole node, so a few kilobytes of "*a" naming a large
// string or list would otherwise become gigabytes once converted to JSON.
const MaxAliasGrowth = 16 << 20

// errAliases is the cause of the refusal of a spec whose aliases expand it beyond
// MaxAliasGrowth.
var errAliases = errors.New("YAML aliases expand the spec too much")

func isAliasError(err error) bool { return errors.Is(err, errAliases) }

// expandedSize adds to *n the size of v with every alias expanded, as the JSON conversion
// writes it, and reports false as soon as *n passes limit. Decoding shares an anchored
// string between its aliases, so v itself is small; walking it costs its node count, which
// the decoder bounds.
func expandedSize(v any, n *int, limit int) bool {
	*n += 4 // punctuation, and scalars that are not strings
	if *n > limit {
		return false
	}
	switch v := v.(type) {
	case string:
		*n += len(v)
	case []any:
		for _, e := range v {
			if !expandedSize(e, n, limit) {
				return false
			}
		}
	case map[any]any:
		for k, e := range v {
			if !expandedSize(k, n, limit) || !expandedSize(e, n, limit) {
				return false
			}
		}
	}
	return *n <= limit
}

// oneDocument refuses YAML that holds more than the job: a second document (after "---"), or
// text after the first one. The conversion to JSON reads the first document alone and would
// drop the rest without a word. Empty documents (a trailing "---") are allowed. It also
// refuses a document whose aliases make it more than MaxAliasGrowth larger than its text.
func oneDocument(data []byte) error {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	for n := 0; ; n++ {
		var v any
		err := dec.Decode(&v)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil && n == 0:
			return &Error{Msg: "spec: " + yamlMessage(err), Err: err}
		case err != nil:
			return &Error{Msg: "spec: text after the end of the job: " + yamlMessage(err), Err: err}
		case n > 0 && v != nil:
			return Invalidf("spec: more than one YAML document: a spec is one job")
		}
		if size := 0; !expandedSize(v, &size, len(data)+MaxAliasGrowth) {
			return &Error{Msg: fmt.Sprintf("spec: YAML aliases expand the spec by more than %d MiB", MaxAliasGrowth>>20), Err: errAliases}
		}
	}
}

// yamlMessage flattens a YAML error to one line without the library's prefixes:
// "yaml: unmarshal errors:\n  line 4: key ..." becomes "line 4: key ...".
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:")
	var parts []string
	for l := range strings.Lines(msg) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// decodeError turns a decoding error into one line naming the field.
func decodeError(prefix string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := strings.TrimPrefix(te.Field, "Job.") // the job is embedded while decoding
		if field == "" {
			field = "value"
		}
		return &Error{Msg: fmt.Sprintf("spec: %s%s: expected %s, got %s", prefix, field, describeType(te.Type), te.Value), Err: err}
	}
	return &Error{Msg: "spec: " + prefix + strings.TrimPrefix(err.Error(), "json: "), Err: err}
}

func describeType(t reflect.Type) string {
	switch {
	case t == nil:
		return "a different type"
	case t == reflect.TypeFor[Duration]() || t == reflect.TypeFor[time.Duration]():
		return `a duration such as "90s", "10m", "1h30m" or a number of seconds`
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

var (
	jobFields  = jsonFieldNames(reflect.TypeFor[Job]())
	taskFields = jsonFieldNames(reflect.TypeFor[Task]())
)

func jsonFieldNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && name != "-" && name != "" {
			names = append(names, name)
		}
	}
	return names
}

// checkFields reports the first (in sorted order) key of obj that is not exactly one of known.
// encoding/json would accept "Name" for "name"; a spec must spell fields as documented.
func checkFields(obj map[string]json.RawMessage, known []string, where string) error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		shown := k
		if len(shown) > 64 {
			shown = strings.ToValidUTF8(shown[:64], "") + "…"
		}
		msg := fmt.Sprintf("spec: unknown field %q in %s", shown, where)
		if s := suggest.Closest(k, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return Invalidf("%s", msg)
	}
	return nil
}
