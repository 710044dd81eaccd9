package nodeconn

import (
	"strings"
	"testing"
)

func TestParseQualifiedName(t *testing.T) {
	for in, want := range map[string]string{
		`t`:               `"t"`,
		`Public.T`:        `"public"."t"`,
		`"My Schema"."T"`: `"My Schema"."T"`,
		`s."a""b"`:        `"s"."a""b"`,
		// Only ASCII letters fold, as in a UTF-8 database; names are cut to 63 bytes.
		`Événements`:                        `"Événements"`,
		"\u212aEEP":                         "\"\u212aeep\"",
		strings.Repeat("A", 70):             `"` + strings.Repeat("a", 63) + `"`,
		`"` + strings.Repeat("é", 40) + `"`: `"` + strings.Repeat("é", 31) + `"`,
	} {
		got, err := ParseQualifiedName(in)
		if err != nil || got.Sanitize() != want {
			t.Errorf("ParseQualifiedName(%q) = %s, %v; want %s", in, got.Sanitize(), err, want)
		}
	}
	for _, bad := range []string{``, `a.b.c`, `a;drop table x`, `"unterminated`, `a.`, `a b`} {
		if _, err := ParseQualifiedName(bad); err == nil {
			t.Errorf("ParseQualifiedName(%q) accepted", bad)
		}
	}
}
