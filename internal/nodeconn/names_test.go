package nodeconn

import "testing"

func TestParseQualifiedName(t *testing.T) {
	for in, want := range map[string]string{
		`t`:               `"t"`,
		`Public.T`:        `"public"."t"`,
		`"My Schema"."T"`: `"My Schema"."T"`,
		`s."a""b"`:        `"s"."a""b"`,
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
