package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodePayload reads the payload of a task of a built-in kind into v: exactly one JSON
// object with no field v does not have. example shows the expected shape in the error for
// a missing payload. Errors start with the kind and are one line.
func DecodePayload(kind string, raw json.RawMessage, v any, example string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return fmt.Errorf("%s: payload is required: %s", kind, example)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: payload: %w", kind, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: payload: unexpected data after the object", kind)
	}
	return nil
}
