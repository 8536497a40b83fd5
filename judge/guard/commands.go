package guard

import (
	"regexp"
	"strings"
)

// Context rules of command lines: the password flags and arguments of
// the tools that take one (mysql -p…, sshpass -p, --password=…, curl -u
// user:pass, htpasswd -b, net use, …), and passwords piped to a command.

// Rules of command lines.
var commandRules = []contextRule{
	// -p PASSWORD (or -pPASSWORD) for the tools whose -p is a password
	// (for psql, redis-cli, ssh and docker run it is a port, and is not
	// matched).
	reRule("cli-password-flag", []string{"-p"},
		regexp.MustCompile(`(?i:\b(?:mysql(?:dump|admin|import|show|check|pump|sh)?|mariadb(?:-?dump|-?admin)?|mycli|sshpass|mongo(?:sh|dump|restore|export|import|stat|top)?|az[ \t]+login|(?:docker|podman|nerdctl|buildah|helm|oras|crane|skopeo)(?:[ \t]+registry)?[ \t]+login|cf[ \t]+(?:login|auth)))\b[^\n|;&]*?[ \t]-p(?:[ \t]+)?`+argValue),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	// redis-cli -a PASSWORD; ldap* -w PASSWORD; zip -P; 7z -pPASSWORD;
	// ssh-keygen -P/-N PASSPHRASE.
	reRule("cli-password-flag", []string{"redis-cli", "ldap", "zip", "7z", "rar", "ssh-keygen"},
		regexp.MustCompile(`(?:(?i:\bredis-cli\b)[^\n|;&]*?[ \t]-a(?:[ \t]+)?|(?i:\bldap\w+\b)[^\n|;&]*?[ \t]-w[ \t]*|(?i:\b(?:un)?zip\b)[^\n|;&]*?[ \t]-P[ \t]+|(?i:\b(?:7z[ar]?|(?:un)?rar)\b)[^\n|;&]*?[ \t]-p|(?i:\bssh-keygen\b)[^\n|;&]*?[ \t]-[PN][ \t]+)`+argValue),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	// --password=…, --password …, -password …, --db-password …,
	// -storepass …, -passin pass:… (never --password-file or
	// --password-stdin: the name must end there).
	reRule("cli-password-option", []string{"-pass", "-pw", "-pwd", "-storepass", "-keypass"},
		regexp.MustCompile(`(?i)(?:^|[\s"'(\[,])--?(?:[a-z0-9]+[-_])*(?:`+passName+`|storepass|keypass|srcstorepass|deststorepass|passin|passout)(?:=|[ \t]+)`+argValue),
		func(n string, m []int) (int, int, bool) {
			s, e := group(m, 1)
			v := strings.ToLower(n[s:e])
			for _, p := range []string{"env:", "file:", "fd:", "stdin"} {
				if strings.HasPrefix(v, p) {
					return 0, 0, false
				}
			}
			if flag := strings.ToLower(n[m[0]:s]); strings.Contains(flag, "-no-") || strings.Contains(flag, "-no_") {
				return 0, 0, false // --no-password takes no value
			}
			return valueOf(n, m, 1)
		}),
	// user:password after -u/--user (curl, httpie's -a/--auth, skopeo's
	// --creds), and smbclient's -U user%password.
	reRule("cli-user-password", []string{"-u", "--user", "--auth", "-a", "--creds"},
		regexp.MustCompile(`(?:(?i:\bcurl\b)[^\n|;&]*?[ \t](?:-u|-U|--user|--proxy-user)(?:=|[ \t]*)|(?i:\bhttps?\b)[^\n|;&]*?[ \t](?:-a|--auth)(?:=|[ \t]+)|(?:^|[ \t])--(?:auth|creds|src-creds|dest-creds|basic-auth)(?:=|[ \t]+))["']?[^\s:"'$]+:([^\s"']+)`),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	reRule("smb-user-password", []string{"-u", "--user"},
		regexp.MustCompile(`(?:^|[ \t])(?:-U|--user(?:name)?)(?:=|[ \t]+)["']?[^\s%"']+%([^\s"']+)`),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	// htpasswd -b [-c] FILE USER PASSWORD, htpasswd -nb USER PASSWORD.
	reRule("htpasswd-batch", []string{"htpasswd"},
		regexp.MustCompile(`(?i)\bhtpasswd((?:[ \t]+-[a-z]+)+)[ \t]+(?:\S+[ \t]+)?\S+[ \t]+`+argValue),
		func(n string, m []int) (int, int, bool) {
			if s, e := group(m, 1); !strings.Contains(n[s:e], "b") {
				return 0, 0, false
			}
			return valueOf(n, m, 2)
		}),
	// net use \\server\share PASSWORD /user:NAME, or /user:NAME PASSWORD.
	reRule("net-use-password", []string{"net use"},
		regexp.MustCompile(`(?i)\bnet[ \t]+use\b[^\n]*?(?:/u(?:ser)?:\S+[ \t]+([^\s/*"'][^\s"']*|`+quoted+`)|\\\\\S+[ \t]+([^\s/*"'][^\s"']*|`+quoted+`)[ \t]+/u(?:ser)?:)`),
		func(n string, m []int) (int, int, bool) {
			if s, _ := group(m, 1); s >= 0 {
				return valueOf(n, m, 1)
			}
			return valueOf(n, m, 2)
		}),
	// rabbitmqctl add_user NAME PASSWORD, change_password NAME PASSWORD.
	reRule("rabbitmq-password", []string{"rabbitmqctl"},
		regexp.MustCompile(`(?i)\brabbitmqctl[ \t]+(?:add_user|change_password)[ \t]+\S+[ \t]+`+argValue),
		func(n string, m []int) (int, int, bool) { return valueOf(n, m, 1) }),
	// A password piped to a command: echo PASSWORD | docker login
	// --password-stdin, echo USER:PASSWORD | chpasswd, <<< PASSWORD.
	reRule("piped-password", []string{"password-stdin", "chpasswd", "passwd"},
		regexp.MustCompile(`(?i)\b(?:echo|printf)[ \t]+(?:-[ne]+[ \t]+)?("[^"\n]*"|'[^'\n]*'|[^\s"'|]+)[ \t]*\|[^\n]*?(?:--password-stdin|\bchpasswd\b|\bpasswd[ \t]+--stdin)|--password-stdin[ \t]*<<<[ \t]*(`+quoted+`|\S+)`),
		func(n string, m []int) (int, int, bool) {
			if s, _ := group(m, 2); s >= 0 {
				return valueOf(n, m, 2)
			}
			return valueOf(n, m, 1)
		}),
}
