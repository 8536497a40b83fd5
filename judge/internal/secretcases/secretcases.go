// Package secretcases holds the secret forms the judge's secret guard
// must catch (those of issue 19, item 8, with variants) and the texts it
// must leave alone, for the tests of the guard (judge/guard) and of what
// the judge sends to models and stores (judge). Test data, in a package so
// that both packages' tests share it; no program imports it.
package secretcases

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Case is one secret in its context: text must not reach a model or
// the audit record with secret (or most of it) readable in it.
type Case struct {
	Name, Text, Secret string
}

// FakeToken is a random-looking token body of n base62 characters, the
// same for the same seed (no key-shaped literal in this file).
func FakeToken(seed uint64, n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	r := rand.New(rand.NewPCG(seed, 19))
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// spaced writes s with sep between every n characters.
func spaced(s, sep string, n int) string {
	var parts []string
	for len(s) > n {
		parts = append(parts, s[:n])
		s = s[n:]
	}
	return strings.Join(append(parts, s), sep)
}

// Cases are the secret forms that reached the panel's models in
// issue 19 (item 8), with variants: passwords with no keyword gitleaks
// knows, recognised by their context, an AWS key with the documentation's
// suffix, and obfuscated tokens.
func Cases() []Case {
	pw := "Tr0ub4dor&3"
	openai := "sk-proj-" + FakeToken(1, 48)
	body := openai[len("sk-proj-"):]
	half := len(body) / 2
	ghp := "ghp_" + FakeToken(2, 36)
	awsID := "AKIA" + "IOSFODNN7" + "EXAMPLE"
	cases := []Case{
		// .pgpass lines, whatever the file is called.
		{"pgpass line", "db.example.com:5432:app:appuser:Vq8#kLp2", "Vq8#kLp2"},
		{"pgpass wildcards", "*:*:*:postgres:s3cr3tPw", "s3cr3tPw"},
		{"pgpass escaped colon", "localhost:5432:*:bob:pa\\:ssw0rd", "pa\\:ssw0rd"},
		{"pgpass in notes", "# my pgpass\nlocalhost:5432:orders:orders_rw:swordfish\n", "swordfish"},
		// Configuration files.
		{"YAML pass", "database:\n  user: app\n  pass: hunter2\n", "hunter2"},
		{"YAML pwd quoted", "pwd: \"" + pw + "\"\n", pw},
		{"YAML db_pass word", "db_pass: swordfish\n", "swordfish"},
		{"YAML short password", "smtp:\n  password: letmein\n", "letmein"},
		{"Kubernetes env list", "env:\n  - name: DB_PASSWORD\n    value: Xk2mP9q\n", "Xk2mP9q"},
		{"docker-compose env", "environment:\n  MYSQL_ROOT_PASSWORD: hunter2\n", "hunter2"},
		{".env short password", "DB_PASSWORD=hunter2\nDB_HOST=db\n", "hunter2"},
		{"export PGPASSWORD", "export PGPASSWORD=hunter2\n", "hunter2"},
		{"my.cnf", "[client]\nuser = root\npassword = hunter2\n", "hunter2"},
		{"JSON pass", `{"user": "app", "pass": "hunter2"}`, "hunter2"},
		{"XML element", "<db><user>app</user><password>hunter2</password></db>", "hunter2"},
		{"XML add key", `<add key="DbPassword" value="hunter2" />`, "hunter2"},
		{"Spring property", "spring.datasource.password=hunter2\n", "hunter2"},
		{"TOML", "[db]\npassword = \"hunter2\"\n", "hunter2"},
		{"Go constant", "const dbPass = \"hunter2\"\n", "hunter2"},
		{"Python call", `conn = psycopg2.connect(host="db", user="app", password="hunter2")`, "hunter2"},
		{"Go comparison", `if password == "hunter2" {`, "hunter2"},
		{"docker run -e", "docker run -e POSTGRES_PASSWORD=hunter2 -d postgres:16", "hunter2"},
		{"Ansible variable", "all:\n  vars:\n    ansible_ssh_pass: hunter2\n", "hunter2"},
		{"Ansible inventory line", "db1 ansible_host=10.0.0.7 ansible_become_password=hunter2", "hunter2"},
		{"Java system property", "java -Djavax.net.ssl.keyStorePassword=hunter2 -jar app.jar", "hunter2"},
		{".npmrc _password", "//registry.example.com/:_password=aHVudGVyMg==", "aHVudGVyMg=="},
		{"PowerShell env", "$env:DB_PASSWORD = 'hunter2'", "hunter2"},
		{"YAML capitalised word", "Password: Swordfish\n", "Swordfish"},
		// SQL.
		{"MySQL IDENTIFIED BY", "CREATE USER 'app'@'%' IDENTIFIED BY 'hunter2';", "hunter2"},
		{"MySQL IDENTIFIED WITH … BY", "ALTER USER app IDENTIFIED WITH mysql_native_password BY 'hunter2';", "hunter2"},
		{"Oracle IDENTIFIED BY", "CREATE USER scott IDENTIFIED BY tiger;", "tiger"},
		{"GRANT IDENTIFIED BY", `GRANT ALL ON db.* TO 'bob'@'%' IDENTIFIED BY "hunter2";`, "hunter2"},
		{"PostgreSQL CREATE ROLE", "CREATE ROLE app WITH LOGIN PASSWORD 'hunter2';", "hunter2"},
		{"PostgreSQL ALTER ROLE", "ALTER ROLE app\n  ENCRYPTED PASSWORD 'hunter2'\n  VALID UNTIL 'infinity';", "hunter2"},
		{"SQL Server CREATE LOGIN", "CREATE LOGIN app WITH PASSWORD = 'hunter2';", "hunter2"},
		{"MySQL SET PASSWORD", "SET PASSWORD FOR 'bob'@'localhost' = PASSWORD('hunter2');", "hunter2"},
		// Command lines.
		{"sshpass -p", "sshpass -p hunter2 ssh root@10.0.0.5", "hunter2"},
		{"sshpass -p quoted", "sshpass -p'hunt er2' scp f host:", "hunt er2"},
		{"sshpass -p attached", "sshpass -phunter2 ssh root@host", "hunter2"},
		{"mysql -p attached", "mysql -u root -phunter2 app < dump.sql", "hunter2"},
		{"mysql -p quoted", "mysql -uroot -p'" + pw + "' -h db", pw},
		{"mysql -p spaced", "mysql -u root -p 'hunter2' app", "hunter2"},
		{"mysqldump --password=", "mysqldump --user=root --password=hunter2 app > dump.sql", "hunter2"},
		{"mysql --password spaced", "mysql --password hunter2 -e 'select 1'", "hunter2"},
		{"psql PGPASSWORD", "PGPASSWORD=hunter2 psql -h db -U app", "hunter2"},
		{"psql conninfo", `psql "host=db user=app password=hunter2 dbname=app"`, "hunter2"},
		{"redis-cli -a", "redis-cli -h cache -p 6379 -a hunter2 ping", "hunter2"},
		{"redis-cli --pass", "redis-cli --pass hunter2 info", "hunter2"},
		{"curl -u", "curl -u admin:hunter2 https://api.example.com/v1", "hunter2"},
		{"curl --user=", "curl --user=admin:" + pw + " https://api.example.com", pw},
		{"htpasswd -b", "htpasswd -b .htpasswd admin hunter2", "hunter2"},
		{"htpasswd -bc", "htpasswd -bc /etc/nginx/.htpasswd admin hunter2", "hunter2"},
		{"htpasswd -nb", "htpasswd -nb admin hunter2", "hunter2"},
		{"docker login -p", "docker login -u bob -p hunter2 registry.example.com", "hunter2"},
		{"docker login --password-stdin echo", `echo "hunter2" | docker login -u bob --password-stdin registry.example.com`, "hunter2"},
		{"net use /user then password", `net use Z: \\srv\share /user:CORP\bob hunter2`, "hunter2"},
		{"net use password then /user", `net use \\srv\share hunter2 /user:bob`, "hunter2"},
		{"wget --http-password", "wget --http-user=bob --http-password=hunter2 https://example.com/f", "hunter2"},
		{"ldapsearch -w", "ldapsearch -x -D cn=admin,dc=example,dc=com -w hunter2 -b dc=example,dc=com", "hunter2"},
		{"smbclient -U user%pass", "smbclient //srv/share -U bob%hunter2", "hunter2"},
		{"openssl -passin pass:", "openssl rsa -in key.pem -passin pass:hunter2 -out plain.pem", "hunter2"},
		{"keytool -storepass", "keytool -list -keystore ks.jks -storepass hunter2", "hunter2"},
		{"mongosh -p", "mongosh --host db -u admin -p hunter2 --authenticationDatabase admin", "hunter2"},
		{"sqlplus user/password", "sqlplus scott/tiger@orcl", "tiger"},
		{"rabbitmqctl add_user", "rabbitmqctl add_user bob hunter2", "hunter2"},
		{"chpasswd", `echo "bob:hunter2" | sudo chpasswd`, "hunter2"},
		{"plink -pw", "plink -ssh bob@host -pw hunter2", "hunter2"},
		{"PowerShell SecureString", `$p = ConvertTo-SecureString "hunter2" -AsPlainText -Force`, "hunter2"},
		// redis.conf, Redis and SMTP commands.
		{"requirepass", "bind 0.0.0.0\nrequirepass hunter2\n", "hunter2"},
		{"masterauth quoted", "masterauth \"" + pw + "\"\n", pw},
		{"CONFIG SET requirepass", "redis-cli CONFIG SET requirepass hunter2", "hunter2"},
		{"ACL SETUSER", "ACL SETUSER bob on >hunter2 ~app:* +@read", "hunter2"},
		{"users.acl", "user bob on >hunter2 ~* &* +@all\n", "hunter2"},
		{"AUTH", "127.0.0.1:6379> AUTH default hunter2", "hunter2"},
		{"SMTP AUTH PLAIN", "AUTH PLAIN AGJvYgBodW50ZXIy", "AGJvYgBodW50ZXIy"},
		// Connection strings.
		{"JDBC MySQL", "jdbc:mysql://db:3306/app?user=bob&password=hunter2&useSSL=true", "hunter2"},
		{"JDBC SQL Server", "jdbc:sqlserver://db:1433;databaseName=app;user=bob;password=hunter2;", "hunter2"},
		{"JDBC Oracle", "jdbc:oracle:thin:scott/tiger@db:1521:orcl", "tiger"},
		{"ADO.NET", "Server=tcp:db,1433;Database=app;User Id=bob;Password=hunter2;", "hunter2"},
		{"ADO.NET with spaces", "Data Source=db;Initial Catalog=app;User ID=bob;Password=my secret pw;", "my secret pw"},
		{"ODBC braces", "Driver={ODBC Driver 18};Server=db;Uid=bob;Pwd={hunt;er2};", "hunt;er2"},
		{"MongoDB URL", "mongodb+srv://bob:hunter2@cluster0.example.mongodb.net/app", "hunter2"},
		{"MongoDB URL with @ in password", "mongodb://bob:p@ssw0rd@db:27017/app", "p@ssw0rd"},
		{"AMQP URL", "amqp://guest:hunter2@rabbit:5672/", "hunter2"},
		{"Redis URL without user", "redis://:hunter2@cache:6379/0", "hunter2"},
		{"Go MySQL DSN", "DSN=bob:hunter2@tcp(db:3306)/app?parseTime=true", "hunter2"},
		{"Go sql.Open DSN", `db, err := sql.Open("mysql", "bob:hunter2@tcp(db:3306)/app")`, "hunter2"},
		{"user:pass@host:port", "connect to bob:hunter2@db.internal:5432/app", "hunter2"},
		{"user:pass@host", "ssh root:Zq9-pQ4w@db.example.com", "Zq9-pQ4w"},
		// Passwords in prose, next to a user name or not.
		{"prose log in as with password", "break glass: log in as admin with password hunter2 and run the migration", "hunter2"},
		{"prose user pw", "user: bob pw: " + pw, pw},
		{"prose root password is", "the root password is s3cr3t! but the app cannot connect", "s3cr3t!"},
		{"prose password for account", "The password for the admin account is Zebra-Horse-42.", "Zebra-Horse-42"},
		{"prose use X as the password", "use swordfish as the password for bob", "swordfish"},
		{"prose X is the password", "Zx9-pQ4w is the root password", "Zx9-pQ4w"},
		{"prose credentials pair", "credentials: admin / hunter2", "hunter2"},
		{"prose login pair", "login admin:hunter2 on the staging box", "hunter2"},
		{"prose log in as pair", "log in as bob/" + pw + " then retry", pw},
		{"prose password's", "my password's hunter2, it keeps failing", "hunter2"},
		{"prose changed to", "password was changed to Winter2024! yesterday", "Winter2024!"},
		{"prose pwd =", "his pwd = qwerty123", "qwerty123"},
		{"prose typographic quotes", "Password — “" + pw + "” (don't share)", pw},
		{"prose quoted passphrase", `the passphrase is "correct horse battery staple"`, "correct horse battery staple"},
		{"prose password: word at the end", "ssh to 10.0.0.5 as root, password: toor", "toor"},
		{"prose username password", "Username bob, password hunter2.", "hunter2"},
		{"prose pw", "pw hunter2", "hunter2"},
		{"prose German", "Benutzer admin, Passwort: geheim123", "geheim123"},
		{"prose French", "utilisateur bob, mot de passe: hunter2", "hunter2"},
		// AWS keys, whatever their suffix.
		{"AWS documentation key id", "aws_access_key_id = " + awsID, awsID},
		{"AWS key id alone", "key " + awsID + " in the log", awsID},
		{"AWS key id, letters only", "id AKIA" + strings.Repeat("Q", 16), "AKIA" + strings.Repeat("Q", 16)},
		{"AWS key id, longer suffix", "AKIA" + "IOSFODNN7EXAMPLE" + "_PROD", "AKIAIOSFODNN7EXAMPLE"},
		{"AWS temporary key id", "ASIA" + "Y34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"},
		{"AWS documentation secret key alone", "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
		{"AWS secret key alone", "secret " + FakeToken(3, 20) + "/" + FakeToken(4, 19), FakeToken(3, 20) + "/" + FakeToken(4, 19)},
		// Obfuscated tokens.
		{"concatenated in Go", `key := "sk-" + "proj-" + "` + body[:half] + `" + "` + body[half:] + `"`, body},
		{"Python implicit concatenation", `KEY = ("sk-proj-` + body[:half] + `" "` + body[half:] + `")`, body},
		{"JavaScript join", `const k = ["sk-proj-", "` + body[:half] + `", "` + body[half:] + `"].join("")`, body},
		{"concatenated over lines", "k := \"sk-proj-" + body[:half] + "\" +\n\t\"" + body[half:] + "\"", body},
		{"spelt with spaces", "the key is " + spaced(openai, " ", 1) + " please", body},
		{"groups of four", "token: " + "ghp_ " + spaced(ghp[4:], " ", 4), ghp[4:]},
		{"spelt with dashes", spaced(ghp, "-", 1), ghp[4:]},
		{"zero-width spaces inside", "key " + openai[:20] + "\u200b" + openai[20:40] + "\u200c" + openai[40:], body},
		{"look-alike letters", "key \u0455k-proj-" + body, body},
		{"full-width", "key ｓｋ－ｐｒｏｊ－" + body, body},
		{"reversed", "key (reversed): " + reverse(openai), reverse(body)},
		{"reversed GitHub token", reverse(ghp), reverse(ghp[4:])},
		{"base64", "key " + base64.StdEncoding.EncodeToString([]byte(openai)), base64.StdEncoding.EncodeToString([]byte(openai))},
		{"base64 twice", base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString([]byte(openai)))), base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString([]byte(openai))))},
		{"base64 of a pgpass line", base64.StdEncoding.EncodeToString([]byte("db:5432:app:bob:hunter2\n")), base64.StdEncoding.EncodeToString([]byte("db:5432:app:bob:hunter2\n"))},
		{"base64 of a reversed key", base64.RawURLEncoding.EncodeToString([]byte(reverse(openai))), base64.RawURLEncoding.EncodeToString([]byte(reverse(openai)))},
		{"hex", "key " + hex.EncodeToString([]byte(openai)), hex.EncodeToString([]byte(openai))},
		{"hex with spaces", spaced(hex.EncodeToString([]byte(ghp)), " ", 2), spaced(hex.EncodeToString([]byte(ghp)), " ", 2)},
		{"percent-encoded", "key=" + percentAll(openai), percentAll(openai)},
		{"partly percent-encoded", "key=sk%2Dproj%2D" + body[:10] + "%" + fmt.Sprintf("%02X", body[10]) + body[11:], body[:10] + "%" + fmt.Sprintf("%02X", body[10]) + body[11:]},
		{"\\x escapes", `k = "` + escapeAll(openai, `\x%02x`) + `"`, escapeAll(openai, `\x%02x`)},
		{"\\u escapes", `k = "` + escapeAll(ghp, `\u%04x`) + `"`, escapeAll(ghp, `\u%04x`)},
		{"HTML character references", escapeAll(openai, "&#%d;"), escapeAll(openai, "&#%d;")},
		{"character codes", "String.fromCharCode(" + codes(ghp) + ")", codes(ghp)},
		{"AWS key id in groups", "AKIA IOSF ODNN 7EXA MPLE", "IOSF ODNN 7EXA MPLE"},
	}
	return cases
}

// Squeeze keeps the letters and digits of s.
func Squeeze(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

func percentAll(s string) string { return escapeAll(s, "%%%02X") }

func escapeAll(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, format, s[i])
	}
	return b.String()
}

func codes(s string) string {
	parts := make([]string, len(s))
	for i := 0; i < len(s); i++ {
		parts[i] = fmt.Sprint(s[i])
	}
	return strings.Join(parts, ",")
}

// Leaked returns the part of secret still readable in out (a window of
// half its length or more, four bytes at least) that the context around
// it does not hold, or "". A secret written in parts in text (split,
// spaced) is looked for in out without its separators, in text as
// normalize (the guard's Normalize) reads it.
func Leaked(out, text, secret string, normalize func(string) string) string {
	if !strings.Contains(text, secret) {
		out, text, secret = Squeeze(out), Squeeze(normalize(text)), Squeeze(secret)
	}
	ctx := strings.ReplaceAll(text, secret, " ")
	w := max(4, (len(secret)+1)/2)
	if w > len(secret) {
		w = len(secret)
	}
	for i := 0; i+w <= len(secret); i++ {
		part := secret[i : i+w]
		if strings.Contains(out, part) && !strings.Contains(ctx, part) {
			return part
		}
	}
	return ""
}

// NoFalseAlarms is code and prose that names passwords without holding
// one: the guard must pass it untouched. Placeholders are not secrets:
// IDENTIFIED BY '${PW}' and '<password>' stand for the value (a
// template's variable, a documentation's blank) and stay readable.
var NoFalseAlarms = []string{
	`password := os.Getenv("DB_PASSWORD")`,
	`pw := strings.TrimSpace(string(data))`,
	`if err := checkPassword(user, password); err != nil {`,
	"PasswordHash string `json:\"password_hash\"`",
	`conn = connect(host=host, user=user, password=pw)`,
	`opts := Options{Username: user, Password: pw}`,
	`Password: cfg.Password,`,
	`case "password":`,
	`fmt.Sprintf("password=%s", pw)`,
	"docker login --password-stdin registry.example.com < token.txt",
	"mysql --password-file=/run/secrets/db -u app",
	"docker run -p 8080:8080 app",
	"ssh -p 2222 bob@host",
	"redis-cli -h cache -p 6379 ping",
	"psql -h db -p 5432 -U app",
	"mysql -u root -p\nSELECT 1;",
	"mysql -u root -p -h db app",
	"mysql -u root -p",
	"curl -u \"$USER:$TOKEN\" https://api.example.com",
	"docker run --user 1000:1000 app",
	"Reset your password from the account page.",
	"The password is incorrect.",
	"The password is required and must be at least 12 characters long.",
	"the password is stored in the vault and rotated nightly",
	"The Redis password: every error and log line shows the URL with its password replaced.",
	"password reset, password manager, password-less login, password-protected files",
	"pass: true\nskip: false\npasses: 3\nbypass: yes\ncompass: north\n",
	"pass the token to the client; the test passes",
	"pass `--nats-identity <identity>` so the command connects",
	"IDENTIFIED BY '${PW}'",
	"CREATE USER app IDENTIFIED BY '<password>';",
	"ALTER USER app IDENTIFIED BY :pw",
	"password: ${DB_PASSWORD}\npassword: \"{{ .Values.db.password }}\"\npassword: <your-password>\npassword: ********\n",
	"--password=…",
	"PWD=/home/bob\nOLDPWD=/tmp\n",
	"main.go:12:5: undefined: x",
	"fe80:0:0:0:1",
	"git@github.com:org/repo.git and mailto:bob@example.com",
	"Password: Required\nPassword: None\n",
	"login/logout, sign in with Google, credentials are stored encrypted",
	"out of quota/credit/budget",
	`<input id="key" type="password" autocomplete="off">`,
	"scheme://user:password@host is how a URL carries credentials",
	"user: bob\nrole: admin\n",
	"sha512-ksB1g74e7haRy02OYm4lOQAlr6sK6hBpAY5R+YC30Gkv4L1COwF6M9umBAYAPxWpGow6Vr+IXtyDjH9fq7A+Zg==",
	"apikey: unauthorized",
	"the task sketch: skip the risky disk step",
	"job 550e8400-e29b-41d4-a716-446655440000 at commit 3f1c2b7e9a0d4c5b6a7f8e9d0c1b2a3f4e5d6c7b",
}
