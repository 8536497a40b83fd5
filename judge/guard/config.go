package guard

import (
	"regexp"
	"strings"
)

// Context rules of configuration files, code, connection strings, SQL
// and Redis: a password-named key and its value in every assignment
// syntax, .pgpass lines, redis.conf directives and ACLs, SQL's IDENTIFIED
// BY and PASSWORD '…', connection strings of every usual form.

var (
	// reAssignment: a password-named key and its value, in every
	// assignment syntax (YAML, .env, INI, properties, JSON, TOML, code,
	// query strings, libpq and ADO connection strings).
	reAssignment = regexp.MustCompile(`(?i)(?:^|[^\w.$-])["']?([\w.-]*(?:` + passName + `))["']?[ \t]*(:=|==|=>|=|:)[ \t]*(` + quoted + `|\{[^}\n]*\}|[^\s"'\x60]+)`)
	// reADO: an ADO.NET or ODBC connection string's password, which may
	// hold spaces and runs to the next ";".
	reADO = regexp.MustCompile(`(?i)(?:^|[;"'])[ \t]*(?:password|pwd)[ \t]*=[ \t]*([^;"'\n{][^;"'\n]*);`)
	// reXMLElement: <password>…</password>, <db.pass>…</db.pass>.
	reXMLElement = regexp.MustCompile(`(?i)<([\w.:-]*(?:` + passName + `))(?:\s[^>]*)?>([^<\n]+)</`)
	// reNameValue: a name and its value given as two attributes or two
	// keys: <add key="DbPassword" value="…"/>, Kubernetes' env list
	// "- name: DB_PASSWORD / value: …".
	reNameValue = regexp.MustCompile(`(?i)\b(?:name|key)[ \t]*[:=][ \t]*["']?([\w.-]+)["']?(?:[ \t]+|[ \t]*\n[ \t]*)value[ \t]*[:=][ \t]*(` + quoted + `|[^\s"'\x60/>]+)`)
	// reEnvAssignment: an environment variable set before a command or
	// inside a line (PGPASSWORD=… psql, docker run -e MYSQL_PWD=…).
	reEnvAssignment = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])([A-Z][A-Z0-9_]*(?:PASSWORD|PASSWD|PASSPHRASE|PASS|PWD|PW)[A-Z0-9_]*)=(` + quoted + `|[^\s"'\x60;&|]+)`)
)

// assignment is reAssignment's value rule. A quoted value is a literal
// whatever the syntax. An unquoted one is a literal where a key starts a
// line (YAML, .env), and elsewhere when it is not code: not after := or
// == (Go, comparisons), not a bare name passed on as an argument
// (connect(password=pw)); inside a line it ends at a delimiter (&, ;).
func assignment(n string, m []int) (int, int, bool) {
	ks, ke := group(m, 1)
	s, e := group(m, 3)
	if !passwordName(n[ks:ke]) || directoryValue(n[ks:ke], n[s:e]) {
		return 0, 0, false
	}
	op := n[m[4]:m[5]]
	if v := n[s:e]; strings.HasPrefix(v, "{") {
		inner := strings.TrimSuffix(strings.TrimPrefix(v, "{"), "}")
		if op != "=" || strings.ContainsAny(inner[:min(1, len(inner))], "{$%") || strings.Contains(inner, ": ") {
			return 0, 0, false
		}
		return s + 1, e - 1, secretValue(inner, true) // ODBC's Pwd={…}
	}
	if _, _, q := unquote(n, s, e); q {
		return valueOf(n, m, 3)
	}
	if op == ":=" || op == "==" || op == "=>" {
		return 0, 0, false
	}
	if !lineStart(n, ks) || strings.TrimSpace(restOfLine(n, e)) != "" && !strings.HasPrefix(strings.TrimSpace(restOfLine(n, e)), "#") {
		// Inside a line: the value ends at a delimiter; a bare name
		// before ")" or "," is an argument (code).
		if i := strings.IndexAny(n[s:e], ";&,)}]"); i >= 0 {
			cut := n[s+i]
			if (cut == ')' || cut == ',') && identifier(n[s:s+i]) {
				return 0, 0, false
			}
			e = s + i
		}
	}
	if e <= s {
		return 0, 0, false
	}
	v := strings.TrimRight(n[s:e], ".,;:!?)]}")
	if op == ":" && !lineStart(n, ks) && wordValue(v) && !clauseEnd(n, s+len(v)) {
		return 0, 0, false // "the Redis password: every error and log line…"
	}
	return s, s + len(v), secretValue(v, false)
}

// identifier reports a bare programming-language name.
func identifier(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(wordChar(c) || c == '.') || i == 0 && c >= '0' && c <= '9' {
			return false
		}
	}
	return true
}

// Rules of configuration files and code.
var configRules = []contextRule{
	reRule("password-assignment", []string{"pass", "pw"}, reAssignment, assignment),
	reRule("connection-string-password", []string{"password", "pwd"}, reADO, func(n string, m []int) (int, int, bool) {
		return valueOf(n, m, 1)
	}),
	reRule("xml-password", []string{"pass", "pw"}, reXMLElement, func(n string, m []int) (int, int, bool) {
		if s, e := group(m, 1); !passwordName(n[s:e]) {
			return 0, 0, false
		}
		return valueOf(n, m, 2)
	}),
	reach(200, reRule("name-value-password", []string{"pass", "pw"}, reNameValue, func(n string, m []int) (int, int, bool) {
		if s, e := group(m, 1); !passwordName(n[s:e]) {
			return 0, 0, false
		}
		return valueOf(n, m, 2)
	})),
	reRule("env-password", []string{"pass", "pw"}, reEnvAssignment, func(n string, m []int) (int, int, bool) {
		if s, e := group(m, 1); !passwordName(n[s:e]) || directoryValue(n[s:e], n[m[4]:m[5]]) {
			return 0, 0, false
		}
		return valueOf(n, m, 2)
	}),
	{id: "pgpass-line", find: pgpassLines},
	// AWS secret access keys: a token rule, hand-written (detect.go).
	{id: "aws-secret-key", find: awsSecretKeys},
	// redis.conf: requirepass and masterauth directives, CONFIG SET, ACL
	// rules (">password") and the AUTH command.
	reRule("redis-password", []string{"requirepass", "masterauth"},
		regexp.MustCompile(`(?i)\b(?:requirepass|masterauth)[ \t]+(`+quoted+`|\S+)`),
		func(n string, m []int) (int, int, bool) {
			s, e, ok := valueOf(n, m, 1)
			if gs, ge := group(m, 1); ok && !lineStart(n, m[0]) && !strings.HasPrefix(strings.ToLower(lineBefore(n, m[0])), "config") {
				// In a sentence ("the requirepass directive"), a quoted
				// value or a made-up one.
				_, _, q := unquote(n, gs, ge)
				ok = q || strongValue(n[s:e])
			}
			return s, e, ok
		}),
	{id: "redis-acl-password", keywords: []string{"user"}, find: redisACL},
	reRule("redis-auth", []string{"auth"},
		regexp.MustCompile(`(?m)(?:^[ \t]*|>[ \t]*|\bredis-cli\b[^\n|;&]*[ \t])AUTH[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*$`),
		func(n string, m []int) (int, int, bool) {
			if s, _ := group(m, 2); s >= 0 {
				return valueOf(n, m, 2)
			}
			return valueOf(n, m, 1)
		}),
	// SQL: IDENTIFIED BY (MySQL, Oracle), PASSWORD '…' in CREATE/ALTER
	// USER/ROLE/LOGIN (PostgreSQL, SQL Server), SET PASSWORD, PASSWORD('…').
	reach(200, reRule("sql-identified-by", []string{"identified"},
		regexp.MustCompile(`(?i)\bidentified[ \t\n]+(?:with[ \t\n]+['"\x60]?[\w-]+['"\x60]?[ \t\n]+)?(?:by|as)[ \t\n]+(?:password[ \t\n]+)?(`+quoted+`|[^\s;,)'"\x60]+)`),
		sqlValue(1))),
	reach(400, reRule("sql-password", []string{"password"},
		regexp.MustCompile(`(?i)(?:\b(?:create|alter)[ \t\n]+(?:user|role|login)\b[^;]{0,300}?|\bwith[ \t\n]+(?:(?:encrypted|unencrypted)[ \t\n]+)?)\bpassword[ \t]*(?:=[ \t]*)?(`+quoted+`)`),
		sqlValue(1))),
	reRule("sql-password", []string{"password"},
		regexp.MustCompile(`(?i)\bset[ \t]+password\b[^;\n]{0,120}?=[ \t]*(?:(?:old_)?password[ \t]*\([ \t]*)?(`+quoted+`)`),
		sqlValue(1)),
	reRule("sql-password", []string{"password"},
		regexp.MustCompile(`(?i)\bpassword[ \t]*\([ \t]*(`+quoted+`)[ \t]*\)`), sqlValue(1)),
	// JDBC for Oracle (user/password@host), sqlplus and its kin.
	reRule("oracle-credentials", []string{"jdbc:oracle", "sqlplus", "sqlldr", "expdp", "impdp", "rman"},
		regexp.MustCompile(`(?i)(?:\bjdbc:oracle:\w+:|\b(?:sqlplus|sqlldr|expdp|impdp|rman)\b(?:[ \t]+-\S+)*[ \t]+["']?)[^\s/@:"']+/([^\s@"']+)`),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	// Go's MySQL DSN (user:pass@tcp(host)/db) and user:pass@host:port
	// without a scheme.
	// Without a port (ssh root:…@db.example.com), a value that looks made
	// up, after a user that is no scheme (mailto:bob@example.com).
	reRule("dsn-credentials", []string{"@"},
		regexp.MustCompile(`(?:^|[\s"'=\x60(])[\w.+-]+:([^\s@"'\x60/][^\s@"'\x60]*)@(?:(?:tcp|tcp6|unix|udp)\(|[\w-]+(?:\.[\w-]+)*:\d{2,5}(?:/|\b))`),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	reRule("dsn-credentials", []string{"@"},
		regexp.MustCompile(`(?:^|[\s"'=\x60(])([\w.+-]+):([^\s@"'\x60/][^\s@"'\x60]*)@[\w-]+(?:\.[\w-]+)+\b`),
		func(n string, m []int) (int, int, bool) {
			switch s, e := group(m, 1); strings.ToLower(n[s:e]) {
			case "mailto", "sip", "sips", "tel", "xmpp", "news", "urn", "im", "pres":
				return 0, 0, false
			}
			s, e, ok := valueOf(n, m, 2)
			return s, e, ok && strongValue(n[s:e])
		}),
	// Credentials in URLs whose password holds an "@" written as it is
	// (the URL rule stops at the first "@").
	reRule("url-credentials-at", []string{"://"},
		regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]{1,30}://[^\s/?#@:"'<>\[\]]*:([^\s"'<>\[\]]*@[^\s"'<>\[\]]*)@[^\s@/"'<>]+`),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	// PowerShell: ConvertTo-SecureString "…" -AsPlainText.
	reRule("powershell-securestring", []string{"convertto-securestring"},
		regexp.MustCompile(`(?i)\bConvertTo-SecureString[ \t]+(?:-String[ \t]+)?(`+quoted+`|[^\s"'\x60-]\S*)`),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
}

// sqlValue is the value of group g unless it is a bind parameter (:pw,
// ?, @pw) or a placeholder.
func sqlValue(g int) func(n string, m []int) (int, int, bool) {
	return func(n string, m []int) (int, int, bool) {
		s, e := group(m, g)
		if s < 0 || strings.ContainsAny(n[s:s+1], ":?@") || strings.EqualFold(n[s:e], "values") {
			return 0, 0, false
		}
		return valueOf(n, m, g)
	}
}

// pgpassLines finds .pgpass lines, host:port:database:user:password
// (":" and "\" escaped by "\"), whatever the file is called: exactly five
// fields, the port a number or "*", no blanks in the first four.
func pgpassLines(n string, emit func(int, int)) {
	for start := 0; start < len(n); {
		end := strings.IndexByte(n[start:], '\n')
		if end < 0 {
			end = len(n)
		} else {
			end += start
		}
		if s, e, ok := pgpassLine(n, start, end); ok {
			emit(s, e)
		}
		start = end + 1
	}
}

// pgpassLine finds the .pgpass entry of the line n[start:end]: the whole
// line (whose password may hold blanks), or a word of it (an entry quoted
// in a sentence).
func pgpassLine(n string, start, end int) (int, int, bool) {
	line := strings.TrimRight(n[start:end], "\r \t")
	if strings.Count(line, ":") < 4 || strings.HasPrefix(strings.TrimSpace(line), "#") {
		return 0, 0, false
	}
	if s, e, ok := pgpassEntry(n, start, start+len(line)); ok {
		return s, e, true
	}
	for i := start; i < start+len(line); {
		for i < start+len(line) && isBlank(n[i]) {
			i++
		}
		j := i
		for j < start+len(line) && !isBlank(n[j]) {
			j++
		}
		if j > i && strings.Count(n[i:j], ":") >= 4 {
			if s, e, ok := pgpassEntry(n, i, j); ok {
				return s, e, true
			}
		}
		i = j
	}
	return 0, 0, false
}

// pgpassEntry reads n[start:end] as host:port:database:user:password.
func pgpassEntry(n string, start, end int) (int, int, bool) {
	line := n[start:end]
	lead := len(line) - len(strings.TrimLeft(line, " \t"))
	var cuts []int
	for i := lead; i < len(line); i++ {
		switch line[i] {
		case '\\':
			i++
		case ':':
			cuts = append(cuts, i)
		}
	}
	if len(cuts) != 4 {
		return 0, 0, false
	}
	fields := []string{line[lead:cuts[0]], line[cuts[0]+1 : cuts[1]], line[cuts[1]+1 : cuts[2]], line[cuts[2]+1 : cuts[3]], line[cuts[3]+1:]}
	for _, f := range fields[:4] {
		if f == "" || strings.ContainsAny(f, " \t\"'`(){}[],;=<>") {
			return 0, 0, false
		}
	}
	if port := fields[1]; port != "*" && (!allDigits(port) || len(port) > 5) {
		return 0, 0, false
	}
	if hexWords(fields) || !secretValue(fields[4], true) {
		return 0, 0, false // an IPv6 address or a MAC, not a password
	}
	return start + cuts[3] + 1, start + len(line), true
}

// hexWords reports fields that are all hexadecimal numbers.
func hexWords(fields []string) bool {
	for _, f := range fields {
		for i := 0; i < len(f); i++ {
			if c := f[i] | 0x20; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// redisACLLine matches a Redis ACL rule: "user NAME …" in users.acl,
// "ACL SETUSER NAME …" on the command line.
var redisACLLine = regexp.MustCompile(`(?i)\bacl[ \t]+setuser[ \t]+\S+[ \t][^\n]*|(?im)^[ \t]*user[ \t]+\S+[ \t][^\n]*`)

// redisACL finds the ">password" rules of Redis ACL lines.
func redisACL(n string, emit func(int, int)) {
	for _, m := range redisACLLine.FindAllStringIndex(n, -1) {
		line := n[m[0]:m[1]]
		for i := 0; i < len(line); i++ {
			if line[i] != '>' || i == 0 || (line[i-1] != ' ' && line[i-1] != '\t') {
				continue
			}
			j := i + 1
			for j < len(line) && line[j] != ' ' && line[j] != '\t' {
				j++
			}
			if j > i+1 && secretValue(line[i+1:j], true) {
				emit(m[0]+i+1, m[0]+j)
			}
			i = j
		}
	}
}
