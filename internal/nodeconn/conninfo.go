package nodeconn

// Conninfo: PostgreSQL connection strings in both of their forms — keyword/value
// (`host=db1 dbname='my db'`) and URL (`postgresql://app@db1:5432/my%20db?sslmode=require`) —
// read the way libpq and pgx read them. deckhand stores node conninfo in its catalog, where
// other people can read it, so CheckConninfo refuses any secret in it; WithUser and WithDBName
// change whom or what a conninfo connects to without breaking either form; Redact makes one
// safe to show.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrSecret is Check's refusal of a conninfo that holds a password.
var ErrSecret = errors.New("conninfo must not contain a password: give each role its password " +
	"in a pgpass file (or a client certificate) on the machines that connect")

// Check refuses a conninfo that is empty, malformed, or holds a secret: the keywords password and
// sslpassword in any case, a password in a URL's userinfo, or a password or sslpassword
// parameter in a URL's query, in any case or percent-encoded — also inside a conninfo given as
// another's dbname. Its errors never quote the conninfo.
func CheckConninfo(dsn string) error {
	if strings.TrimSpace(dsn) == "" {
		return errors.New("conninfo is empty")
	}
	in, err := parse(dsn)
	if err != nil {
		if looksSecret(dsn) {
			return ErrSecret
		}
		return fmt.Errorf("conninfo cannot be parsed: %v", err)
	}
	if in.hasSecret(dsn) || looksSecret(dsn) {
		return ErrSecret
	}
	// libpq and pgx take only these exact prefixes for a URL; anything else would be read as
	// keyword/value, and not as what it looks like.
	if in.url && !strings.HasPrefix(dsn, "postgresql://") && !strings.HasPrefix(dsn, "postgres://") {
		return errors.New("conninfo cannot be parsed: a URL must start with postgresql:// or postgres://, in lower case")
	}
	for _, p := range in.pairs {
		if !libpqKeywords[p.key] {
			return fmt.Errorf("conninfo keyword %q is not one PostgreSQL's clients know (pg_dump, psql): see the libpq connection parameters", p.key)
		}
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return errors.New("conninfo cannot be parsed: check its keywords and values")
	}
	return nil
}

// libpqKeywords are the connection parameters libpq takes (PostgreSQL 15 to 17). A node's
// conninfo reaches libpq too (pg_dump and pg_restore for a move), which refuses any other
// keyword, while the Go driver would send an unknown one to the server as a setting and fail
// only when connecting: refused when the node is registered instead.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true,
	"passfile": true, "require_auth": true, "channel_binding": true, "connect_timeout": true,
	"client_encoding": true, "options": true, "application_name": true,
	"fallback_application_name": true, "keepalives": true, "keepalives_idle": true,
	"keepalives_interval": true, "keepalives_count": true, "tcp_user_timeout": true,
	"replication": true, "gssencmode": true, "sslmode": true, "sslnegotiation": true,
	"sslcompression": true, "sslcert": true, "sslkey": true, "sslpassword": true,
	"sslcertmode": true, "sslrootcert": true, "sslcrl": true, "sslcrldir": true, "sslsni": true,
	"requirepeer": true, "ssl_min_protocol_version": true, "ssl_max_protocol_version": true,
	"krbsrvname": true, "gsslib": true, "gssdelegation": true, "service": true,
	"target_session_attrs": true, "load_balance_hosts": true,
}

// WithUser returns dsn connecting as user instead of the user it names (none: unchanged).
// A dsn that cannot be parsed is returned unchanged, for the driver to report.
func WithUser(dsn, user string) string {
	if user == "" {
		return dsn
	}
	in, err := parse(dsn)
	if err != nil {
		return dsn
	}
	isUser := func(k string) bool { return k == "user" }
	if !in.url {
		return in.keywordValueWith(isUser, "user", user)
	}
	in.userinfo, in.hasUserinfo = encode(user), true
	if in.hasPassword {
		in.userinfo += ":" + dsn[in.pwStart:in.pwEnd]
	}
	return in.urlWithout(dsn, isUser)
}

// WithDBName returns dsn connecting to database db instead of the one it names (none:
// unchanged). A dsn that cannot be parsed is returned unchanged, for the driver to report.
func WithDBName(dsn, db string) string {
	if db == "" {
		return dsn
	}
	in, err := parse(dsn)
	if err != nil {
		return dsn
	}
	isDB := func(k string) bool { return k == "dbname" || k == "database" } // pgx reads both
	if !in.url {
		return in.keywordValueWith(isDB, "dbname", db)
	}
	in.path, in.hasPath = encode(db), true
	return in.urlWithout(dsn, isDB)
}

// Redact returns s with the secrets of any conninfo in it hidden, for display: a conninfo that
// parses keeps every other byte as written; other text has password=... values and URL
// passwords hidden as well as they can be recognized.
func Redact(s string) string {
	if in, err := parse(s); err == nil {
		type span struct{ from, to int }
		var spans []span
		if in.url && in.hasPassword {
			spans = append(spans, span{in.pwStart, in.pwEnd})
		}
		for _, p := range in.pairs {
			if isSecretKey(p.key) {
				spans = append(spans, span{p.vstart, p.end})
			}
		}
		slices.SortFunc(spans, func(a, b span) int { return b.from - a.from })
		for _, sp := range spans {
			s = s[:sp.from] + redacted + s[sp.to:]
		}
	}
	s = urlPasswordRE.ReplaceAllString(s, "${1}:"+redacted+"@")
	return keyPasswordRE.ReplaceAllString(s, "${1}"+redacted)
}

const redacted = "REDACTED"

var (
	// scheme://user:password@ — up to the last '@' before the path, so that neither libpq's
	// reading (the first '@') nor a generic URL parser's (the last) shows any of it.
	urlPasswordRE = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://[^:/@\s]*):[^/\s]*@`)
	// password=value and sslpassword = 'quoted value', also as URL query parameters. A doubled
	// quote, which libpq does not read as one, is taken as part of the value: text that does
	// not parse is masked too far rather than not far enough.
	keyPasswordRE = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.|'')*'?|[^\s&]*)`)
	// Text that mentions password= however it was spelled, once percent-decoded.
	passwordKeyRE = regexp.MustCompile(`(?i)password\s*=`)
)

func isSecretKey(k string) bool {
	k = strings.ToLower(strings.Trim(decodeLenient(k), spaces))
	return k == "password" || k == "sslpassword"
}

// hasSecret reports whether a parsed conninfo holds a secret, directly or in a nested conninfo.
func (in *info) hasSecret(s string) bool {
	if in.url && in.hasPassword {
		return true
	}
	values := make([]string, 0, len(in.pairs)+1)
	for _, p := range in.pairs {
		if isSecretKey(p.key) {
			return true
		}
		values = append(values, p.val)
	}
	if in.hasPath {
		values = append(values, decodeLenient(in.path))
	}
	// libpq reads a dbname that is itself a conninfo as one; check every value that could be.
	for _, v := range values {
		if len(v) >= len(s) {
			continue // cannot happen for a value of s; keeps the recursion finite regardless
		}
		if nested, err := parse(v); err == nil && (nested.url || strings.ContainsRune(v, '=')) && nested.hasSecret(v) {
			return true
		}
	}
	return false
}

// looksSecret is the catch-all for text that names a password however it is spelled or
// however malformed the rest is: "password=" once percent-decoded, in any case, or a URL whose
// part before the path has a ':' before an '@'.
func looksSecret(s string) bool {
	if passwordKeyRE.MatchString(decodeLenient(s)) {
		return true
	}
	if scheme, rest := urlScheme(s); scheme != "" {
		authority, _, _ := strings.Cut(s[rest:], "/")
		if at := strings.LastIndexByte(authority, '@'); at >= 0 && strings.ContainsRune(authority[:at], ':') {
			return true
		}
	}
	return false
}

// keywordValueWith renders the pairs but those drop matches, then key=val.
func (in *info) keywordValueWith(drop func(string) bool, key, val string) string {
	var parts []string
	for _, p := range in.pairs {
		if !drop(p.key) {
			parts = append(parts, p.key+"="+quote(p.val))
		}
	}
	return strings.Join(append(parts, key+"="+quote(val)), " ")
}

// urlWithout renders the URL (from its raw parts, so that what is not changed stays as written)
// without the query parameters drop matches.
func (in *info) urlWithout(dsn string, drop func(string) bool) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(in.scheme))
	if in.hasUserinfo {
		b.WriteString(in.userinfo)
		b.WriteByte('@')
	}
	b.WriteString(in.netloc)
	if in.hasPath {
		b.WriteByte('/')
		b.WriteString(in.path)
	}
	sep := byte('?')
	for _, p := range in.pairs {
		if drop(p.key) {
			continue
		}
		b.WriteByte(sep)
		b.WriteString(dsn[p.start:p.end])
		sep = '&'
	}
	return b.String()
}
