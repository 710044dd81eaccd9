package nodeconn

import (
	"errors"
	"strings"
)

// The parsers below read conninfo the way libpq (and pgx, which follows it) does, so that what
// deckhand checks is what a driver connects with. Besides the values they keep where each value
// sits in the input, so that Redact can hide a secret and leave every other byte as written.
// Their errors never quote the input.

// pair is one keyword=value of a keyword/value conninfo, or one parameter of a URL's query.
type pair struct {
	key        string // as written (keyword/value) or percent-decoded (URL query)
	val        string // unquoted and unescaped, or percent-decoded
	start, end int    // where the whole pair is in the input
	vstart     int    // where its raw value starts in the input (it ends at end)
}

// info is a parsed conninfo.
type info struct {
	url   bool
	pairs []pair // keyword/value pairs, or the URL's query parameters

	// URL only: the raw parts between the separators, and where the password is.
	scheme      string // "postgresql://" or "postgres://", in the case written
	userinfo    string // before the '@', if hasUserinfo
	hasUserinfo bool
	user        string // decoded
	hasPassword bool   // the userinfo has a ':'
	pwStart     int    // where the raw password is in the input
	pwEnd       int
	netloc      string // host[:port] list, raw
	path        string // the database name, raw, if hasPath
	hasPath     bool
	hasQuery    bool
	hostSet     bool // pgx reads a host setting from the URL
	portSet     bool // ... a port setting
}

const spaces = " \t\n\r\v\f"

func isSpace(c byte) bool { return strings.IndexByte(spaces, c) >= 0 }

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

var errNUL = errors.New("it contains a NUL byte")

// urlScheme returns the URL scheme s starts with ("postgresql://" or "postgres://", in any case,
// after leading white space) and where the rest begins, or "" when s is not a URL.
func urlScheme(s string) (scheme string, rest int) {
	i := skipSpace(s, 0)
	for _, p := range []string{"postgresql://", "postgres://"} {
		if len(s)-i >= len(p) && strings.EqualFold(s[i:i+len(p)], p) {
			return s[i : i+len(p)], i + len(p)
		}
	}
	return "", 0
}

// parse reads s in either form. A URL is recognized in any case and after white space, unlike
// libpq: for finding secrets, reading too much as a URL is the safe side (Check then refuses what
// libpq would not read as one).
func parse(s string) (*info, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, errNUL
	}
	if scheme, rest := urlScheme(s); scheme != "" {
		return parseURL(s, scheme, rest)
	}
	pairs, err := parseKeywordValue(s)
	if err != nil {
		return nil, err
	}
	return &info{pairs: pairs}, nil
}

// parseKeywordValue reads `key = value key='quoted \' value' ...`: white space around '=' is
// allowed, a value is quoted with single quotes, and a backslash takes the next character
// literally, quoted or not (a trailing one is dropped).
func parseKeywordValue(s string) ([]pair, error) {
	var out []pair
	i := skipSpace(s, 0)
	for i < len(s) {
		start := i
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, errors.New(`a keyword has no "=" after it`)
		}
		key := strings.Trim(s[i:i+eq], spaces)
		if key == "" {
			return nil, errors.New(`a value has no keyword before its "="`)
		}
		if strings.ContainsAny(key, spaces) {
			return nil, errors.New(`a keyword has no "=" after it`)
		}
		i = skipSpace(s, i+eq+1)
		vstart := i
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
					if i == len(s) {
						break
					}
				}
				val.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("a quoted value is not terminated")
			}
			i++ // the closing quote
		} else {
			for ; i < len(s) && !isSpace(s[i]); i++ {
				if s[i] == '\\' {
					i++
					if i == len(s) {
						break
					}
				}
				val.WriteByte(s[i])
			}
		}
		out = append(out, pair{key: key, val: val.String(), start: start, end: i, vstart: vstart})
		i = skipSpace(s, i)
	}
	return out, nil
}

// parseURL reads postgresql://[user[:password]@][host][:port][,...][/dbname][?param=value&...]
// from s, whose scheme ends at rest. Like libpq, the userinfo ends at the first '@' before any
// '/', and every part is percent-decoded after it is split off.
func parseURL(s, scheme string, rest int) (*info, error) {
	in := &info{url: true, scheme: scheme}
	p := s[rest:]
	off := rest // where p starts in s
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		in.hasUserinfo, in.userinfo = true, p[:i]
		user, pw, hasPW := strings.Cut(in.userinfo, ":")
		if user != "" {
			u, err := decode(user)
			if err != nil {
				return nil, err
			}
			in.user = u
		}
		if hasPW {
			in.hasPassword = true
			in.pwStart = off + len(user) + 1
			in.pwEnd = off + i
			if _, err := decode(pw); err != nil {
				return nil, err
			}
		}
		p, off = p[i+1:], off+i+1
	}

	n, hostSet, portSet, err := netlocLen(p)
	if err != nil {
		return nil, err
	}
	in.netloc, in.hostSet, in.portSet = p[:n], hostSet, portSet
	p, off = p[n:], off+n

	if strings.HasPrefix(p, "/") {
		in.hasPath = true
		in.path, _, _ = strings.Cut(p[1:], "?")
		if _, err := decode(in.path); err != nil {
			return nil, err
		}
		p, off = p[1+len(in.path):], off+1+len(in.path)
	}
	if strings.HasPrefix(p, "?") {
		in.hasQuery = true
		pairs, err := parseQuery(p[1:], off+1)
		if err != nil {
			return nil, err
		}
		in.pairs = pairs
	}
	return in, nil
}

// netlocLen returns the length of the host list at the start of p: hosts separated by ',',
// each a name or a bracketed IPv6 address with an optional ":port". It ends at '/' or '?'.
func netlocLen(p string) (n int, hostSet, portSet bool, err error) {
	var hosts, ports strings.Builder
	i := 0
	for {
		if i < len(p) && p[i] == '[' {
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return 0, false, false, errors.New(`an IPv6 host address has no closing "]"`)
			}
			if end == 1 {
				return 0, false, false, errors.New("an IPv6 host address is empty")
			}
			hosts.WriteString(p[i+1 : i+end])
			i += end + 1
			if i < len(p) && strings.IndexByte(":/?,", p[i]) < 0 {
				return 0, false, false, errors.New(`an IPv6 host address is followed by something other than ":" or "/"`)
			}
		} else {
			j := strings.IndexAny(p[i:], ":/?,")
			if j < 0 {
				j = len(p) - i
			}
			hosts.WriteString(p[i : i+j])
			i += j
		}
		if i < len(p) && p[i] == ':' {
			i++
			j := strings.IndexAny(p[i:], "/?,")
			if j < 0 {
				j = len(p) - i
			}
			ports.WriteString(p[i : i+j])
			i += j
		}
		if i >= len(p) || p[i] != ',' {
			break
		}
		i++
		hosts.WriteByte(',')
		ports.WriteByte(',')
	}
	if hosts.Len() > 0 {
		if _, err := decode(hosts.String()); err != nil {
			return 0, false, false, err
		}
	}
	if ports.Len() > 0 {
		if _, err := decode(ports.String()); err != nil {
			return 0, false, false, err
		}
	}
	return i, hosts.Len() > 0, ports.Len() > 0, nil
}

// parseQuery reads key=value pairs separated by '&'; each has exactly one raw '='. off is where
// q starts in the input.
func parseQuery(q string, off int) ([]pair, error) {
	var out []pair
	for q != "" { // an empty query, or a trailing '&', adds nothing
		raw, next, more := strings.Cut(q, "&")
		rawKey, rawVal, ok := strings.Cut(raw, "=")
		if !ok {
			return nil, errors.New(`a URL query parameter has no "="`)
		}
		if strings.IndexByte(rawVal, '=') >= 0 {
			return nil, errors.New(`a URL query parameter has more than one "="`)
		}
		key, err := decode(rawKey)
		if err != nil {
			return nil, err
		}
		val, err := decode(rawVal)
		if err != nil {
			return nil, err
		}
		out = append(out, pair{key: key, val: val, start: off, end: off + len(raw), vstart: off + len(rawKey) + 1})
		if !more {
			break
		}
		q, off = next, off+len(raw)+1
	}
	return out, nil
}

// decode percent-decodes one URL part as libpq does: "%" and two hex digits, never %00; spaces
// around it are dropped, spaces inside refused.
func decode(raw string) (string, error) {
	raw = strings.Trim(raw, " ")
	if strings.IndexByte(raw, ' ') >= 0 {
		return "", errors.New("a URL part contains a space (write %20)")
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] != '%' {
			b.WriteByte(raw[i])
			continue
		}
		if i+2 >= len(raw) {
			return "", errors.New("a URL part has an incomplete percent-encoding")
		}
		hi, ok1 := unhex(raw[i+1])
		lo, ok2 := unhex(raw[i+2])
		if !ok1 || !ok2 {
			return "", errors.New("a URL part has an invalid percent-encoding")
		}
		if hi == 0 && lo == 0 {
			return "", errors.New("a URL part encodes a NUL byte (%00)")
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), nil
}

// decodeLenient decodes what it can and keeps the rest as written: for recognising keys in
// text that does not parse.
func decodeLenient(raw string) string {
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && i+2 < len(raw) {
			hi, ok1 := unhex(raw[i+1])
			lo, ok2 := unhex(raw[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// encode percent-encodes every byte but the unreserved ones, for a URL part.
func encode(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// quote writes a keyword/value value that reads back as s.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
