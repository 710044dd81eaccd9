package nodeconn

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// noEnvironment keeps pgx from reading connection settings from this process's environment or
// files, so that what a test sees comes from the conninfo alone.
func noEnvironment(t testing.TB) {
	for _, v := range []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSSLPASSWORD", "PGSERVICE", "PGOPTIONS", "PGAPPNAME"} {
		t.Setenv(v, "")
	}
	t.Setenv("PGPASSFILE", "/nonexistent/deckhand-test-pgpass")
	t.Setenv("PGSERVICEFILE", "/nonexistent/deckhand-test-pg_service.conf")
}

// secretConninfo is every way of putting a secret in a conninfo that Check must refuse; each
// holds "s3cr3t", which no refusal may repeat.
var secretConninfo = []string{
	"host=localhost dbname=app user=app password=s3cr3t",
	"host=localhost password = 's3cr3t' dbname=app",
	"host=localhost PASSWORD=s3cr3t",
	"host=localhost Password='s3cr3t'",
	"host=localhost password=",
	"host=localhost sslpassword=s3cr3t",
	"host=localhost SSLPassword = s3cr3t",
	"host=localhost dbname='host=other password=s3cr3t'",
	"host=localhost dbname='postgres://app:s3cr3t@other/app'",
	"host=localhost application_name='x' password='s3cr3t", // unterminated quote
	"postgres://app:s3cr3t@localhost:5432/app",
	"postgresql://app:s3cr3t@localhost/app?sslmode=disable",
	"postgres://app:@localhost/app",
	"postgres://:s3cr3t@localhost/app",
	"postgres://app@localhost/app?password=s3cr3t",
	"postgres://app@localhost/app?sslmode=disable&PassWord=s3cr3t",
	"postgres://app@localhost/app?pass%77ord=s3cr3t",
	"postgres://app@localhost/app?%70assword=s3cr3t",
	"postgres://app@localhost/app?%20password=s3cr3t",
	"postgres://app@localhost/app?sslpassword=s3cr3t",
	"postgres://app@localhost/app?SSLPASSWORD=s3cr3t",
	"POSTGRES://app:s3cr3t@localhost/app",
	"PostgreSQL://app@localhost/app?password=s3cr3t",
	"  postgres://app:s3cr3t@localhost/app",
	"postgres://app:s3cr3t@localhost:notaport/app",
	"postgres://app:s3 cr3t@localhost/app",           // malformed: a space
	"postgres://app:s3cr3t@local host/app",           // malformed: a space in the host
	"postgres://h?x=a:s3cr3t@localhost/app",          // libpq: userinfo up to the first '@'
	"postgres://app@localhost/app?password=s3%63r3t", // the value percent-encoded
	"postgres://localhost/password=s3cr3t",
}

func TestCheckRefusesSecrets(t *testing.T) {
	noEnvironment(t)
	for _, dsn := range secretConninfo {
		err := CheckConninfo(dsn)
		if !errors.Is(err, ErrSecret) {
			t.Errorf("CheckConninfo(%q) = %v, want ErrSecret", dsn, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("CheckConninfo(%q) repeats the secret: %v", dsn, err)
		}
	}
}

func TestCheckRefusesMalformed(t *testing.T) {
	noEnvironment(t)
	for _, dsn := range []string{
		"",
		"   ",
		"localhost",
		"host=localhost port",
		"host='localhost",
		"=x",
		"host=localhost port=notaport",
		"host=localhost\x00port=5432",
		"postgres://localhost:notaport/app",
		"postgres://[::1/app",
		"postgres://localhost/app?sslmode",
		"postgres://localhost/app?a=b=c",
		"postgres://localhost/a%zzpp",
		"postgres://localhost/a%00pp",
		"POSTGRES://localhost/app",
		" postgres://localhost/app",
	} {
		err := CheckConninfo(dsn)
		if err == nil {
			t.Errorf("CheckConninfo(%q) accepted a malformed conninfo", dsn)
			continue
		}
		if errors.Is(err, ErrSecret) {
			t.Errorf("CheckConninfo(%q) = %v, want a parse error", dsn, err)
		}
		if strings.TrimSpace(dsn) != "" && strings.Contains(err.Error(), strings.TrimSpace(dsn)) {
			t.Errorf("CheckConninfo(%q) quotes the conninfo: %v", dsn, err)
		}
	}
}

// A keyword libpq does not know is refused when the node is registered: the driver would send
// it to the server as a setting (and fail there when connecting), and pg_dump refuses it.
func TestCheckRefusesUnknownKeywords(t *testing.T) {
	noEnvironment(t)
	for dsn, keyword := range map[string]string{
		"bogus==": "bogus",
		"host=localhost dbname=app Host=elsewhere":     "Host",
		"host=localhost database=app":                  "database",
		"host=localhost search_path=evil":              "search_path",
		"postgres://localhost/app?statement_timeout=1": "statement_timeout",
	} {
		err := CheckConninfo(dsn)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("keyword %q", keyword)) {
			t.Errorf("CheckConninfo(%q) = %v, want the keyword %q refused", dsn, err, keyword)
		}
	}
}

func TestCheckAccepts(t *testing.T) {
	noEnvironment(t)
	for _, dsn := range []string{
		"host=localhost port=5432 dbname=app user=app sslmode=disable",
		"host = localhost dbname = 'my app' application_name='it\\'s mine'",
		`host=/var/run/postgresql dbname=a\ b`,
		"postgres://app@localhost:5432/app",
		"postgresql://app@localhost/app?sslmode=disable&application_name=deck%20hand",
		"postgres://localhost",
		"postgres://app@h1:5432,h2:5433/app?target_session_attrs=read-write",
		"postgres://app@[::1]:5432/app",
		"postgresql:///app?host=/var/run/postgresql",
		"postgres://localhost/app?",
		"host=h1,h2 port=5432,5433 dbname=app connect_timeout=5 keepalives_idle=30 target_session_attrs=read-write options='-c lock_timeout=1s'",
		"host=db sslmode=disable passfile=/etc/deckhand/pgpass fallback_application_name=x",
	} {
		if err := CheckConninfo(dsn); err != nil {
			t.Errorf("CheckConninfo(%q) = %v, want nil", dsn, err)
		}
	}
}

func TestWithUserAndDBName(t *testing.T) {
	noEnvironment(t)
	for _, tc := range []struct {
		dsn, user, db string
	}{
		{"host=localhost port=5432 dbname=app user=admin sslmode=disable", "owner", "other"},
		{"host=localhost user = admin user=admin2", "own er", "my db"},
		{"host=localhost dbname=app database=app2", `o'w\ner`, `d'b\`},
		{`host=a\`, "owner", "db"}, // a trailing backslash must not swallow what follows
		{"postgres://admin@localhost:5432/app?sslmode=disable", "owner", "other"},
		{"postgres://admin@localhost/app?user=admin2&dbname=app2&database=app3", "own@er:x/y?z", "d/b?c&d=e"},
		{"postgresql://localhost", "owner", "db"},
		{"postgres://admin@h1:5432,h2:5433/app?target_session_attrs=any", "owner", "db"},
		{"postgres://admin@[::1]:5432/app", "owner", "db"},
		{"postgres:///app?host=/tmp", "owner", "db"},
	} {
		cfg, err := pgconn.ParseConfig(WithUser(tc.dsn, tc.user))
		if err != nil {
			t.Errorf("WithUser(%q, %q): %v", tc.dsn, tc.user, err)
		} else if cfg.User != tc.user {
			t.Errorf("WithUser(%q, %q) connects as %q", tc.dsn, tc.user, cfg.User)
		}
		orig, _ := pgconn.ParseConfig(tc.dsn)
		cfg, err = pgconn.ParseConfig(WithDBName(tc.dsn, tc.db))
		if err != nil {
			t.Errorf("WithDBName(%q, %q): %v", tc.dsn, tc.db, err)
			continue
		}
		if cfg.Database != tc.db {
			t.Errorf("WithDBName(%q, %q) connects to %q", tc.dsn, tc.db, cfg.Database)
		}
		// Nothing else changes.
		if orig != nil && (cfg.User != orig.User || cfg.Host != orig.Host || cfg.Port != orig.Port ||
			len(cfg.Fallbacks) != len(orig.Fallbacks) || cfg.RuntimeParams["target_session_attrs"] != orig.RuntimeParams["target_session_attrs"]) {
			t.Errorf("WithDBName(%q) changed more than the database: %+v", tc.dsn, cfg)
		}
	}
	if got := WithUser("host=x", ""); got != "host=x" {
		t.Errorf("WithUser with no user changed the conninfo: %q", got)
	}
	// A password stays where it was: WithUser changes whom, not how.
	cfg, err := pgconn.ParseConfig(WithUser("postgres://admin:pw@localhost/app", "owner"))
	if err != nil || cfg.User != "owner" || cfg.Password != "pw" {
		t.Errorf("WithUser on a URL with a password: %+v, %v", cfg, err)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"host=localhost password=s3cr3t dbname=app", "host=localhost password=REDACTED dbname=app"},
		{"host=localhost password = 's3 cr\\'3t' dbname=app", "host=localhost password = REDACTED dbname=app"},
		{"host=localhost SSLPassword=s3cr3t", "host=localhost SSLPassword=REDACTED"},
		{"postgres://app:s3cr3t@localhost:5432/app?sslmode=disable", "postgres://app:REDACTED@localhost:5432/app?sslmode=disable"},
		{"postgres://app@localhost/app?pass%77ord=s3cr3t&x=y", "postgres://app@localhost/app?pass%77ord=REDACTED&x=y"},
		{"postgres://app:s3@cr3t@localhost/app", "postgres://app:REDACTED@localhost/app"},
		{"connect to postgres://app:s3cr3t@localhost/app failed: password=s3cr3t rejected",
			"connect to postgres://app:REDACTED@localhost/app failed: password=REDACTED rejected"},
		{"host='unterminated password='s3cr3t", "host='unterminated password=REDACTED"},
		{"host=x password='it''s3cr3t' port=5432", "host=x password=REDACTED port=5432"},
		{"host=localhost dbname=app", "host=localhost dbname=app"},
	} {
		got := Redact(tc.in)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "s3") {
			t.Errorf("Redact(%q) shows part of the secret: %q", tc.in, got)
		}
	}
	for _, dsn := range secretConninfo {
		if got := Redact(dsn); strings.Contains(got, "s3cr3t") {
			t.Errorf("Redact(%q) = %q: the secret shows", dsn, got)
		}
	}
}

// Redact hides conninfo secrets quoted inside other text too, such as an error message.
func TestRedactInText(t *testing.T) {
	for in, want := range map[string]string{
		"host=a password=x dbname=b":              "host=a password=REDACTED dbname=b",
		"host=a password = 'x y' dbname=b":        "host=a password = REDACTED dbname=b",
		"host=a PASSWORD='it\\'s' dbname=b":       "host=a PASSWORD=REDACTED dbname=b",
		"host=a sslpassword=x":                    "host=a sslpassword=REDACTED",
		"postgres://u:p@h/db":                     "postgres://u:REDACTED@h/db",
		"postgres://u@h/db?password=p&sslmode=no": "postgres://u@h/db?password=REDACTED&sslmode=no",
		"dial postgres://u:p@h/db: refused":       "dial postgres://u:REDACTED@h/db: refused",
		"host=a dbname=b":                         "host=a dbname=b",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
