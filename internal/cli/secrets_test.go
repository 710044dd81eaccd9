package cli_test

import (
	"strings"
	"testing"

	"github.com/deckhandhq/deckhand/deckhandtype"
)

// leakyConninfo puts the secret "s3cr3t" in a conninfo in every spelling libpq or pgx would
// read, and a few they would not read but a person would.
var leakyConninfo = []string{
	"host=localhost dbname=app user=app password=s3cr3t",
	"host=localhost dbname=app password = 's3cr3t'",
	"host=localhost PASSWORD=s3cr3t",
	"host=localhost sslpassword=s3cr3t sslkey=/k.pem",
	"host=localhost SslPassword = 's3cr3t'",
	"host=localhost dbname='host=other password=s3cr3t'",
	"postgres://app:s3cr3t@localhost:5432/app",
	"postgresql://app:s3cr3t@localhost/app?sslmode=disable",
	"POSTGRES://app:s3cr3t@localhost/app",
	"postgres://app@localhost/app?password=s3cr3t",
	"postgres://app@localhost/app?sslmode=disable&PASSWORD=s3cr3t",
	"postgres://app@localhost/app?pass%77ord=s3cr3t",
	"postgres://app@localhost/app?sslpassword=s3cr3t",
	"postgres://app@localhost/app?SSL%50ASSWORD=s3cr3t",
	"postgres://app:s3cr3t@localhost:notaport/app",
	"postgres://h?x=y:s3cr3t@localhost/app",
}

// `deckhand node add` refuses a secret in the conninfo however it is spelt: exit 2, one line,
// the secret not repeated, nothing registered.
func TestNodeAddRefusesSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, dsn := range leakyConninfo {
		r := e.run("node", "add", "leaky", "--dsn", dsn)
		wantUsage(t, r, `node "leaky": conninfo must not contain a password`)
		if strings.Contains(r.stderr, "s3cr3t") {
			t.Errorf("the refusal of %q repeats the password: %q", dsn, r.stderr)
		}
	}
	if nodes := decode[[]deckhandtype.Node](t, e.run("node", "list", "-o", "json")); len(nodes) != 0 {
		t.Errorf("refused nodes were registered: %+v", nodes)
	}
}
