package judge_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// The eleven leaks of issue 9 (finding 6): each kind of secret once passed
// the guard and reached a model. The fakes are built at run time so that
// this file holds no key-shaped literal.
var (
	leakPassword = "Vx9" + "kQ2mZp7Lw"
	leakGitHub   = "ghp_" + strings.Repeat("a1B2c3D4e5F6", 3)
	leakWebhook  = "https://hooks.slack.com/services/" + "T0A1B2C3D" + "/" + "B0E4F5G6H" + "/" + "q7R8s9T0u1V2w3X4y5Z6a7B8"
	leakJWT      = fakeJWT()
	leakDBURL    = "postgres://admin:" + leakPassword + "@db.internal:5432/app"
)

func fakeJWT() string {
	enc := base64.RawURLEncoding
	sig := sha256.Sum256([]byte("not a real signature"))
	return enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		enc.EncodeToString([]byte(`{"sub":"1234567890","name":"alice","iat":1516239022}`)) + "." +
		enc.EncodeToString(sig[:])
}

// fakeKeyPEM is a freshly generated EC private key, PEM-encoded.
func fakeKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// leak is one secret in a request: in a file (path, content) or in the
// problem text; secret must not reach a model.
type leak struct {
	name          string
	path, content string
	problem       string
	secret        string
}

func leaks(t *testing.T) []leak {
	keyPEM := fakeKeyPEM(t)
	keyB64 := base64.StdEncoding.EncodeToString([]byte(keyPEM))
	gitConfig := "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://alice:" + leakPassword + "@git.example.com/team/repo.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
	harmless := "DEBUG=1\nREGION=eu-west-1\n"
	return []leak{
		{name: "JWT in an Authorization header", path: "scripts/call.sh",
			content: "#!/bin/sh\ncurl -s -H \"Authorization: Bearer " + leakJWT + "\" https://api.example.com/v1/jobs\n", secret: leakJWT},
		{name: "Slack webhook URL", path: "ops/notify.py",
			content: "import requests\n\nWEBHOOK = \"" + leakWebhook + "\"\nrequests.post(WEBHOOK, json={\"text\": \"done\"})\n", secret: leakWebhook[len("https://hooks.slack.com/services/"):]},
		{name: "netrc content in a file named otherwise", path: "docs/setup-notes.txt",
			content: "machine git.example.com\n  login alice\n  password " + leakPassword + "\n", secret: leakPassword},
		{name: ".git/config with a password in the remote URL", path: ".git/config", content: gitConfig, secret: leakPassword},
		{name: "the same git config under another name", path: "backup/remote.cfg", content: gitConfig, secret: leakPassword},
		{name: "base64 private key in a Kubernetes Secret", path: "deploy/tls.yaml",
			content: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: api-tls\ntype: kubernetes.io/tls\ndata:\n  tls.key: " + keyB64 + "\n", secret: keyB64[:40]},
		{name: "base64 private key in a Kubernetes Secret, .txt", path: "deploy/tls.txt",
			content: "kind: Secret\ndata:\n  tls.key: " + keyB64 + "\n", secret: keyB64[:40]},
		{name: "JSON password", path: "config/app.json",
			content: "{\n  \"db\": {\"user\": \"app\", \"password\": \"" + leakPassword + "\"}\n}\n", secret: leakPassword},
		{name: "DATABASE_URL with a password", path: "deploy/app.ini",
			content: "[app]\nDATABASE_URL=" + leakDBURL + "\nWORKERS=4\n", secret: leakPassword},
		{name: ".env with a zero-width space in its name", path: ".en\u200bv", content: harmless, secret: "eu-west-1"},
		{name: ".env with a Cyrillic e in its name", path: "svc/.\u0435nv", content: harmless, secret: "eu-west-1"},
		{name: ".env in full-width letters", path: "\uff0e\uff45\uff4e\uff56", content: harmless, secret: "eu-west-1"},
		{name: ".env with a trailing dot", path: "svc/.env.", content: harmless, secret: "eu-west-1"},
		{name: "GitHub token as a file name", path: "notes/" + leakGitHub + ".md", content: "# notes\n", secret: leakGitHub},
		{name: "JWT in the problem", problem: "login fails with 401; the token I send is " + leakJWT, secret: leakJWT},
		{name: "DB URL in the problem", problem: "migrations hang against " + leakDBURL + " since Monday", secret: leakPassword},
	}
}

// TestLeaksRefused: every leak of finding 6, sent in a request, stays out
// of the prompts: a file holding (or named by) a secret is withheld with a
// reason, a secret in the problem is redacted.
func TestLeaksRefused(t *testing.T) {
	t.Parallel()
	s, err := judge.Settings{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range leaks(t) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := judgetest.Request("leak", "s-leak", "the build fails")
			if tt.problem != "" {
				req.Problem = schemas.BreakGlassTrigger + " " + tt.problem
			}
			if tt.path != "" {
				req.Files = []schemas.ContextFile{
					{Path: "src/main.go", Content: "package main\n\nfunc main() { panic(\"boom\") }\n"},
					{Path: tt.path, Content: tt.content},
				}
			}
			a := judge.Assemble(req, schemas.ProblemCodeBug, nil, &s)
			if strings.Contains(a.User, tt.secret) || strings.Contains(a.Problem, tt.secret) {
				t.Errorf("the secret reached the prompt:\n%s", a.User)
			}
			if !strings.Contains(a.User, "panic(\"boom\")") && tt.path != "" {
				t.Error("the harmless file was withheld too")
			}
			if tt.path != "" {
				// The answer lists withheld files by name, so the name is
				// redacted too: a token can be a file name.
				if len(a.Excluded) != 1 || a.Excluded[0].Path != guard.Redact(tt.path) || strings.Contains(a.Excluded[0].Path, tt.secret) {
					t.Fatalf("excluded %+v, want %q redacted", a.Excluded, tt.path)
				}
				t.Logf("withheld: %s", a.Excluded[0].Reason)
			}
			if tt.problem != "" && !strings.Contains(a.Problem, guard.Redacted) {
				t.Errorf("problem %q: not redacted", a.Problem)
			}
		})
	}
}

// TestLeaksReadFiles: the requester's side (ReadFiles) withholds the same
// files, read from disk.
func TestLeaksReadFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	var paths []string
	for _, tt := range leaks(t) {
		if tt.path == "" || strings.Contains(tt.path, "\uff0e") {
			continue // full-width names: some file systems refuse them
		}
		p := filepath.Join(root, filepath.FromSlash(tt.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, tt.path)
	}
	files, excluded, err := judge.ReadFiles(root, paths, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Errorf("%s was read: %q", f.Path, f.Content)
	}
	if len(excluded) != len(paths) {
		t.Errorf("excluded %d files, want %d: %+v", len(excluded), len(paths), excluded)
	}
}

// TestNoFalseAlarms: ordinary code, identifiers, UUIDs, hashes in lock
// files, digests and plain words pass the guard untouched.
func TestNoFalseAlarms(t *testing.T) {
	t.Parallel()
	texts := map[string]string{
		"Go code":                "func (c *Client) Do(ctx context.Context) error {\n\tapiKey := c.cfg.APIKey\n\ttoken := req.Header.Get(\"Authorization\")\n\tsecret, err := os.ReadFile(c.cfg.SecretFile)\n\tPromptTokens: usage.PromptTokens,\n\tMaxTokens = DefaultMaxTokens\n\treturn nil\n}\n",
		"config with references": "api_key_env: OPENROUTER_API_KEY\npassword: ${DB_PASSWORD}\ntoken: \"{{ .Values.token }}\"\nurl: postgres://app:${PGPASS}@db:5432/app\nAuthorization: Bearer YOUR_API_KEY\n",
		"UUIDs":                  "job 550e8400-e29b-41d4-a716-446655440000 and request 6ba7b810-9dad-11d1-80b4-00c04fd430c8 failed",
		"go.sum": "github.com/nats-io/nats.go v1.55.0 h1:Qb0nJfsNcaRNQxnsrI8NeAzwQZtR3D3YnEKRkX3kb5M=\n" +
			"github.com/nats-io/nats.go v1.55.0/go.mod h1:zhOWq4bH6O0Pjnpm7a2O+GRnGVHPu/z5uDoRoPdT1P8=\n",
		"package-lock": `"integrity": "sha512-Lq6ixRaz0C/2s9Pm1tKx3tGh3Sx4TgWc0Zw7dD9QaaJ0p2Yb+ZlVqZ6rP8t5Lh2rH2Dk4vXr2fRbK5gB6hX9ZgQ=="`,
		"Cargo.lock":   "checksum = \"4b3a1f6e9c0d8e7f2a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f\"\n",
		"digests":      "image: nats@sha256:0f4b2c8e9d1a7b3c5e6f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0 at commit 3f1c2b7e9a0d4c5b6a7f8e9d0c1b2a3f4e5d6c7b",
		"words":        "The password reset flow fails when the token has expired; the secret manager rotates keys nightly.",
		"Cyrillic":     "Ошибка при сборке: паника в main.go, токен не найден",
		"markdown":     "Set `OPENAI_API_KEY=...` or `password:` in the config; see docs/security.md.",
	}
	for name, text := range texts {
		if guard.ContainsSecret(text) {
			t.Errorf("%s: taken for a secret", name)
		}
		if got := guard.Redact(text); got != text {
			t.Errorf("%s: guard.Redact changed it to %q", name, got)
		}
	}
}

// TestAuditHoldsNoSecret: the audit record of a request whose problem
// holds a JWT and a database URL, and whose files include one named by a
// token, holds none of them; nor does anything sent to a model.
func TestAuditHoldsNoSecret(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	req := judgetest.Request("leak-audit-1", "s-leak-audit", "main panics with boom; token "+leakJWT+", db "+leakDBURL)
	req.Files = []schemas.ContextFile{
		{Path: "src/main.go", Content: "package main\n\nfunc main() { panic(\"boom\") }\n"},
		{Path: "notes/" + leakGitHub + ".md", Content: "# notes\n"},
	}
	req.ExcludedFiles = []schemas.ExcludedFile{{Path: "keys/" + leakGitHub, Reason: "credential file name"}}
	req.BuildLog = "connecting to " + leakDBURL + "\nFAIL\n"
	resp := answered(t, env, req)
	recs := env.Audit("s-leak-audit")
	if len(recs) != 1 {
		t.Fatalf("audit %+v", recs)
	}
	audit, answer := asJSON(t, recs), asJSON(t, resp)
	sent := env.Requests.String()
	if !strings.Contains(sent, `panic(\"boom\")`) {
		t.Fatal("the harmless file did not reach the panel: the checks below prove nothing")
	}
	for _, secret := range []string{leakJWT, leakPassword, leakGitHub, strings.SplitN(leakJWT, ".", 2)[0] + "." + strings.SplitN(leakJWT, ".", 3)[1]} {
		if strings.Contains(audit, secret) {
			t.Errorf("the audit stream holds %q:\n%s", secret, audit)
		}
		if strings.Contains(sent, secret) {
			t.Errorf("a model received %q", secret)
		}
		if strings.Contains(answer, secret) {
			t.Errorf("the answer holds %q:\n%s", secret, answer)
		}
	}
	if !strings.Contains(recs[0].Problem, guard.Redacted) {
		t.Errorf("audited problem %q", recs[0].Problem)
	}
}

// TestHeldRequestHoldsNoSecret (review finding 4): a held request whose
// problem holds a JWT, whose build log holds a database URL and whose
// files include one with a password is stored in the approvals bucket
// only as the guard leaves it: the secret file dropped and listed in
// excluded_files, the text redacted. Neither the bucket, maker judge
// pending nor the approval reply holds a secret; the approved call still
// runs on the harmless file.
func TestHeldRequestHoldsNoSecret(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(costly(2.5))
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	req := judgetest.Request("leak-held-1", "s-leak-held", "redesign the module boundaries; token "+leakJWT)
	req.BudgetUSD = 3
	req.Files = []schemas.ContextFile{
		{Path: "docs/design.md", Content: "# Module boundaries\n\nThe layering we have today.\n"},
		{Path: "config/app.json", Content: "{\n  \"db\": {\"user\": \"app\", \"password\": \"" + leakPassword + "\"}\n}\n"},
	}
	req.BuildLog = "connecting to " + leakDBURL + "\n"
	req.PriorAttempts[0].Note = "tried with " + leakDBURL
	done := holdAndWait(ctx, t, env, req)

	secrets := []string{leakJWT, leakPassword, strings.SplitN(leakJWT, ".", 2)[0] + "." + strings.SplitN(leakJWT, ".", 3)[1]}
	check := func(where string, data []byte) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(string(data), s) {
				t.Errorf("%s holds %q:\n%s", where, s, data)
			}
		}
	}
	e, err := approvalsKV(ctx, t, env).Get(ctx, bus.JudgeApprovalKey("acme", "leak-held-1"))
	if err != nil {
		t.Fatal(err)
	}
	check("the approvals bucket", e.Value())
	var stored schemas.BreakGlassApproval
	if err := schemas.Decode(e.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	if r := stored.Request; r == nil || len(r.Files) != 1 || r.Files[0].Path != "docs/design.md" ||
		len(r.ExcludedFiles) != 1 || r.ExcludedFiles[0].Path != "config/app.json" || !strings.Contains(r.Problem, guard.Redacted) {
		t.Errorf("stored request %+v", stored.Request)
	}
	pending, err := judge.Pending(ctx, env.JS, bus.DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(pending)
	if err != nil {
		t.Fatal(err)
	}
	check("maker judge pending", data)
	rec, err := decide(ctx, env, "approver", "leak-held-1", schemas.DecisionApprove, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	check("the approval reply", data)
	r := <-done
	if r.err != nil || r.resp.Outcome != schemas.BreakGlassAnswered {
		t.Fatalf("approved call: %+v, %v", r.resp, r.err)
	}
	sent := env.Requests.String()
	if !strings.Contains(sent, "The layering we have today.") {
		t.Error("the harmless file did not reach the panel")
	}
	check("what the models received", []byte(sent))
}

// answered asks req and fails the test unless the panel answered it.
func answered(t *testing.T, env *judgetest.Env, req *schemas.BreakGlassRequest) *schemas.BreakGlassResponse {
	t.Helper()
	resp, err := env.Ask(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != schemas.BreakGlassAnswered {
		t.Fatalf("outcome %s: %s", resp.Outcome, resp.Reason)
	}
	return resp
}

// asJSON is v in JSON.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// jsonEscaped is s as encoding/json writes it inside a string ("&" is
// \u0026): the form a secret would take in a stored message.
func jsonEscaped(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b[1 : len(b)-1])
}

// holdsAny returns the first of secrets that data holds, raw or escaped
// as JSON, or "".
func holdsAny(data string, secrets []string) string {
	for _, s := range secrets {
		if strings.Contains(data, s) || strings.Contains(data, jsonEscaped(s)) {
			return s
		}
	}
	return ""
}

// TestAuditHoldsNoProsePassword (issue 19, item 8): passwords no keyword
// marks, written in the problem as prose next to a user name, in command
// lines of the build log and of a prior attempt's note, in a .pgpass line
// and in YAML, go through a real judge on a real NATS server. Neither the
// audit stream, the answers bucket, the answer, the judge's log nor
// anything sent to a model holds one, and the files holding them are
// withheld with their reason.
func TestAuditHoldsNoProsePassword(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	logs := &judgetest.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	_, js := testkit.Connect(t, env.NATS.URL)
	sv, err := judge.New(ctx, js, judge.Config{Settings: judgetest.TestSettings(), BaseURL: env.Sim.URL(), Concurrency: 2,
		SoftStop: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Stop)

	pw := map[string]string{
		"prose": "Hq7!vR2x" + "-admin", "root": "s3cr3t!" + "Zq", "pair": "Tr0ub4dor" + "&3", "mysql": "K9#mQ2" + "wLx",
		"sshpass": "L0ck3d" + "!n", "pgpass": "V3ry$ec" + "ret", "yaml": "sword" + "fish",
	}
	var secrets []string
	for _, p := range pw {
		secrets = append(secrets, p)
	}
	req := judgetest.Request("leak-prose-1", "s-leak-prose", "main panics with boom since the database moved. Log in as admin with password "+
		pw["prose"]+"; the root password is "+pw["root"]+" and the app's is user: bob pw: "+pw["pair"])
	req.Requester = "ci (user: bob pw: " + pw["pair"] + ")"
	req.BuildLog = "+ mysql -u root -p" + pw["mysql"] + " app < migrate.sql\nFAIL\n"
	req.PriorAttempts[2].Note = "tools: sshpass -p " + pw["sshpass"] + " ssh root@db failed"
	req.Files = []schemas.ContextFile{
		{Path: "src/main.go", Content: "package main\n\nfunc main() { panic(\"boom\") }\n"},
		{Path: "notes/db.txt", Content: "db.internal:5432:app:app:" + pw["pgpass"] + "\n"},
		{Path: "config/db.yaml", Content: "database:\n  user: app\n  pass: " + pw["yaml"] + "\n"},
	}
	resp := answered(t, env, req)
	sent := env.Requests.String()
	if !strings.Contains(sent, `panic(\"boom\")`) || !strings.Contains(sent, "Log in as admin with password") {
		t.Fatal("the harmless file or the problem did not reach the panel: the checks below prove nothing")
	}
	withheld := map[string]string{}
	for _, x := range resp.ExcludedFiles {
		withheld[x.Path] = x.Reason
	}
	if !strings.Contains(withheld["notes/db.txt"], "pgpass-line") || !strings.Contains(withheld["config/db.yaml"], "password-assignment") {
		t.Errorf("withheld %v", withheld)
	}
	recs := env.Audit("s-leak-prose")
	if len(recs) != 1 || !strings.Contains(recs[0].Problem, "Log in as admin with password "+guard.Redacted) {
		t.Fatalf("audit %+v", recs)
	}
	topo, err := topology.OpenJudge(ctx, env.JS, topology.JudgeConfig{Namespace: bus.DefaultNamespace})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := topo.Answers.Get(ctx, bus.JudgeAnswerKey("acme", "leak-prose-1"))
	if err != nil {
		t.Fatal(err)
	}
	for where, data := range map[string]string{
		"the audit stream": asJSON(t, recs), "the answers bucket": string(stored.Value()), "the answer": asJSON(t, resp),
		"the judge's log": logs.String(), "what the models received": sent,
	} {
		if s := holdsAny(data, secrets); s != "" {
			t.Errorf("%s holds %q", where, s)
		}
	}
}

// TestHeldArbitrationHoldsNoSecret: an arbitration held by the cost gate
// is stored in the approvals bucket with its step state redacted, and a
// denial's reason is redacted in the approvals and answers buckets and the
// audit stream; the approved arbitration still runs and decides.
func TestHeldArbitrationHoldsNoSecret(t *testing.T) {
	t.Parallel()
	env := holdingArbitrations(t)
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	statePW, denyPW := "Hq7!vR2x"+"-state", "Zx9#pQ4w"+"-deny"
	ask := func(job string) <-chan *schemas.ArbiterDecision {
		req := arbitration(job, 7)
		req.State = `{"pegs":[[10,9,8,7,6,5,4,3,2],[1],[]],"note":"log in as admin with password ` + statePW + `"}`
		return arbitrateAsync(t, env, req)
	}
	approved, denied := ask("j-leak-approve"), ask("j-leak-deny")
	waitPending(ctx, t, env, 2)
	idOf := func(job string) string { return schemas.ArbitrationRequestID("acme", job, 7) }
	kv := approvalsKV(ctx, t, env)
	for _, job := range []string{"j-leak-approve", "j-leak-deny"} {
		e, err := kv.Get(ctx, bus.JudgeApprovalKey("acme", idOf(job)))
		if err != nil {
			t.Fatal(err)
		}
		if holdsAny(string(e.Value()), []string{statePW}) != "" || !strings.Contains(string(e.Value()), "log in as admin with password") {
			t.Errorf("the approvals bucket holds %s", e.Value())
		}
	}
	if _, err := decide(ctx, env, "approver", idOf("j-leak-approve"), schemas.DecisionApprove, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := judgeclient.Decide(ctx, env.NC, bus.DefaultNamespace, "approver", &schemas.ApprovalDecision{
		RequestID: idOf("j-leak-deny"), Tenant: "acme", Decision: schemas.DecisionDeny, By: "bob",
		Reason: "not now; the db password is " + denyPW}); err != nil {
		t.Fatal(err)
	}
	if d := <-approved; d == nil || d.Outcome != schemas.ArbiterDecided || d.VoteKey != keyA {
		t.Errorf("approved: %+v", d)
	}
	if d := <-denied; d == nil || d.Outcome != schemas.ArbiterNeedsHuman || holdsAny(d.Reason, []string{denyPW}) != "" {
		t.Errorf("denied: %+v", d)
	}
	topo, err := topology.OpenJudge(ctx, env.JS, topology.JudgeConfig{Namespace: bus.DefaultNamespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"j-leak-approve", "j-leak-deny"} {
		var all []string
		for _, kv := range []jetstream.KeyValue{topo.Approvals, topo.Answers} {
			key := bus.JudgeAnswerKey("acme", idOf(job))
			if kv == topo.Approvals {
				key = bus.JudgeApprovalKey("acme", idOf(job))
			}
			e, err := kv.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, string(e.Value()))
		}
		all = append(all, asJSON(t, env.Audit(job)))
		for i, data := range all {
			if s := holdsAny(data, []string{statePW, denyPW}); s != "" {
				t.Errorf("%s: %s holds %q", job, []string{"the approvals bucket", "the answers bucket", "the audit stream"}[i], s)
			}
		}
	}
	if s := holdsAny(env.Requests.String(), []string{statePW}); s != "" || !strings.Contains(env.Requests.String(), "log in as admin with password") {
		t.Errorf("what the models received holds %q (or not the state at all)", s)
	}
}
