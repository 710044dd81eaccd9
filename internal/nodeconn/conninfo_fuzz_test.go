package nodeconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// keys lists the settings pgx reads from a parsed conninfo (before its own aliases), the way
// pgconn's ConnStringAllowedKeys names them.
func (in *info) keys(s string) []string {
	var ks []string
	if in.url {
		if rawUser, _, _ := strings.Cut(in.userinfo, ":"); rawUser != "" {
			ks = append(ks, "user")
		}
		if in.hasPassword && in.pwEnd > in.pwStart {
			ks = append(ks, "password")
		}
		if in.hostSet {
			ks = append(ks, "host")
		}
		if in.portSet {
			ks = append(ks, "port")
		}
		if in.hasPath && in.path != "" {
			ks = append(ks, "dbname")
		}
	}
	for _, p := range in.pairs {
		ks = append(ks, p.key)
	}
	return ks
}

// FuzzCheck: Check never accepts a conninfo that pgx would take a password or sslpassword
// from, and whatever it accepts, WithUser and WithDBName change exactly what they say.
//
// pgx is asked twice: for the password it reads, and whether the conninfo sets any setting
// beyond those this package found in it — so a secret hidden where this parser does not look
// (but pgx does) fails the property even when the key file that would use it does not exist.
func FuzzCheck(f *testing.F) {
	for _, s := range secretConninfo {
		f.Add(s)
	}
	for _, s := range []string{
		"host=localhost port=5432 dbname=app user=app",
		"host = localhost dbname = 'my app'",
		`host=a\ b dbname=c\`,
		"postgres://app@localhost:5432/app?sslmode=disable",
		"postgresql://app@h1,h2:5433/app?ssl=true",
		"postgres://[::1]:5432/app?application_name=a%20b",
		"postgres://@localhost/app",
		"postgres://a:b@c@d/e",
		"postgres://h/db?&",
		"user= dbname=x",
	} {
		f.Add(s)
	}
	noEnvironment(f)
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := pgconn.ParseConfig(s)
		// A password pgx reads, written once and long enough not to be part of anything else,
		// never shows once redacted.
		if err == nil && len(cfg.Password) >= 4 && strings.Count(s, cfg.Password) == 1 && strings.Contains(Redact(s), cfg.Password) {
			t.Errorf("Redact(%q) shows the password", s)
		}
		if CheckConninfo(s) != nil {
			return
		}
		if err != nil {
			t.Fatalf("Check accepted %q, which pgx cannot parse: %v", s, err)
		}
		if cfg.Password != "" {
			t.Fatalf("Check accepted %q, from which pgx reads a password", s)
		}
		in, err := parse(s)
		if err != nil {
			t.Fatalf("Check accepted %q, which this package cannot parse: %v", s, err)
		}
		_, err = pgconn.ParseConfigWithOptions(s, pgconn.ParseConfigOptions{ConnStringAllowedKeys: in.keys(s)})
		if err != nil {
			var pce *pgconn.ParseConfigError
			if !errors.As(err, &pce) || strings.Contains(err.Error(), "ConnStringAllowedKeys") {
				t.Fatalf("pgx reads a setting from %q that this package missed: %v", s, err)
			}
		}

		for _, user := range []string{"owner", "o w'n\\er@x:y/z?&="} {
			cfg, err := pgconn.ParseConfig(WithUser(s, user))
			if err != nil || cfg.User != user {
				t.Fatalf("WithUser(%q, %q): user %q, err %v", s, user, userOf(cfg), err)
			}
		}
		for _, db := range []string{"db", "d b'\\/?&=#%"} {
			cfg, err := pgconn.ParseConfig(WithDBName(s, db))
			if err != nil || cfg.Database != db {
				t.Fatalf("WithDBName(%q, %q): database %q, err %v", s, db, dbOf(cfg), err)
			}
		}
	})
}

func userOf(c *pgconn.Config) string {
	if c == nil {
		return ""
	}
	return c.User
}

func dbOf(c *pgconn.Config) string {
	if c == nil {
		return ""
	}
	return c.Database
}
