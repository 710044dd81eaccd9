package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/deckhandhq/deckhand/internal/pgcluster"
)

// passfile is this process's pgpass file: CreateLoginRole adds a line per role, the way an
// operator gives each owner role its password on a worker's machine. PGPASSFILE points to it.
var passfile struct {
	sync.Mutex
	path string
}

// CreateLoginRole creates on c a LOGIN role (with attrs, a fixed string such as "CREATEDB") whose
// password is random, and adds the password to this process's pgpass file, which the
// environment variable PGPASSFILE names from then on: every program this process starts, and
// every connection it opens without a password, logs in as the role with it.
func CreateLoginRole(ctx context.Context, c *pgcluster.Cluster, name, attrs string) error {
	var raw [18]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return err
	}
	password := base64.RawURLEncoding.EncodeToString(raw[:])
	if err := c.CreateRole(ctx, name, strings.TrimSpace("LOGIN "+attrs)); err != nil {
		return err
	}
	if err := c.Exec(ctx, "postgres", "ALTER ROLE "+pgx.Identifier{name}.Sanitize()+" PASSWORD "+literal(password)); err != nil {
		return err
	}
	return addPassword(name, password)
}

// addPassword records a role's password for any host and port: a role name is unique in the
// process, and tests reach clusters through proxies on other ports too.
func addPassword(role, password string) error {
	passfile.Lock()
	defer passfile.Unlock()
	if passfile.path == "" {
		f, err := os.CreateTemp("", "deckhand-pgpass-*")
		if err != nil {
			return fmt.Errorf("pgtest: pgpass: %w", err)
		}
		f.Close()
		passfile.path = f.Name()
		os.Setenv("PGPASSFILE", passfile.path)
		AtExit(func() { os.Remove(passfile.path) })
	}
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	f, err := os.OpenFile(passfile.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgtest: pgpass: %w", err)
	}
	_, err = fmt.Fprintf(f, "*:*:*:%s:%s\n", esc.Replace(role), esc.Replace(password))
	return errors.Join(err, f.Close())
}

// Password returns the password CreateLoginRole gave role, read back from this process's
// pgpass file, for a test that must hand it over itself (to sign in over HTTP, say).
func Password(role string) (string, error) {
	passfile.Lock()
	path := passfile.path
	passfile.Unlock()
	if path == "" {
		return "", fmt.Errorf("pgtest: no password recorded for role %q", role)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("pgtest: pgpass: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		// host:port:database:user:password, with ':' and '\' escaped by '\'.
		var fields []string
		var cur strings.Builder
		for i := 0; i < len(line); i++ {
			switch {
			case line[i] == '\\' && i+1 < len(line):
				i++
				cur.WriteByte(line[i])
			case line[i] == ':':
				fields = append(fields, cur.String())
				cur.Reset()
			default:
				cur.WriteByte(line[i])
			}
		}
		fields = append(fields, cur.String())
		if len(fields) == 5 && fields[3] == role {
			return fields[4], nil
		}
	}
	return "", fmt.Errorf("pgtest: no password recorded for role %q", role)
}
