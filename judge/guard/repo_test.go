package guard

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// repoFixtures are the files of this repository the guard withholds, and
// why that is right: each holds a credential-shaped literal (a fake one,
// for a test), which a real credential in its place would look exactly
// like. Any other file withheld or redacted is a false positive.
var repoFixtures = map[string]string{
	// The guard's own tests: fake secrets in every form it catches.
	"judge/secrets_test.go":                     "the guard's tests: fake keys, a NATS creds file, passwords",
	"judge/guard/internal_test.go":              "the guard's tests: a JWT, URLs with passwords, a netrc line",
	"judge/internal/secretcases/secretcases.go": "the guard's test cases: every context form of issue 19 with a fake password",
	"judge/leaks_test.go":                       "the guard's tests: the leaks of issue 9, a netrc file, a fake webhook",
	"judge/exfil_test.go":                       "the guard's tests: a fake OpenAI key and private key",
	"judge/example_test.go":                     "the guard's example: Redact on a fake OPENAI_API_KEY",
	"judge/arbitration_internal_test.go":        "a step state holding a fake OpenAI key, which arbitration must refuse",
	// Other tests and their test data, holding the credentials of the
	// servers they start or fake keys of the shapes they check.
	"client/httpapi/fake_test.go":            "a fake maker API key (mk_…)",
	"cmd/maker/cli/keys_test.go":             "fake maker API keys (mk_…)",
	"internal/apikey/apikey_test.go":         "fake maker API keys (mk_…)",
	"cmd/maker/cli/auth_test.go":             "NATS URLs with a test user's password, a test password",
	"internal/bus/conn_test.go":              "NATS URLs with passwords, for RedactURL's test",
	"internal/store/url_test.go":             "Redis URLs with passwords, for the URL parser's and RedactURL's test",
	"e2e/backends_test.go":                   "rediss:// URLs with the test Redis ACL users' passwords",
	"internal/testkit/redisnodes.go":         "the throwaway admin password of the test kit's Redis",
	"internal/simllm/server_test.go":         "a fake provider key the simulated model checks",
	"internal/simllm/testdata/npm/check.mjs": "a fake provider key the simulated model must refuse",
	"schemas/testdata/checkpoint.json":       "a base64 trace of random bytes: as random as a token, and no rule can tell them apart",
	// A sample's capability token (a 128-bit HMAC) is a secret: whoever
	// holds it may answer that sample. These hold a test one.
	"schemas/testdata/sample_request.json":                            "a test sample capability token",
	"schemas/testdata/sample_result.json":                             "a test sample capability token",
	"schemas/testdata/invalid/sample_request.negative_index.json":     "a test sample capability token",
	"schemas/testdata/invalid/sample_request.sample_id_mismatch.json": "a test sample capability token",
	"schemas/testdata/invalid/sample_result.bad_token.json":           "a test sample capability token",
	"schemas/fuzz_test.go":                                            "a test sample capability token in the fuzz seeds",
	"voter/voter_test.go":                                             "a test sample capability token",
	"judge/guard/gitleaks/gitleaks.toml":                              "gitleaks' rule file: token patterns and the example keys its allowlists name",
	"judge/guard/gitleaks_rules.go":                                   "generated from gitleaks' rule file: the same patterns and example keys",
	"cmd/maker/cli/voter_test.go":                                     "a test sample capability token",
	"cmd/maker/cli/voterstream_test.go":                               "a test sample capability token",
	"schemas/codec_test.go":                                           "a test sample capability token",
	"schemas/samplecodec_test.go":                                     "a test sample capability token",
	"internal/topology/windows_bench_test.go":                         "a test sample capability token in the ids it measures",
	// Tests of refusals: credentials where none may be.
	"cmd/maker/cli/providers_test.go":      "a provider URL with a fake key in its user info, which must be refused",
	"cmd/maker/cli/webhook_test.go":        "a webhook URL with user info, which must be refused",
	"internal/providers/store_test.go":     "providers files with a fake api_key or a key in a URL, which must be refused",
	"internal/ratelimit/ratelimit_test.go": "the test Redis ACL user's password",
	"internal/webhook/sign_test.go":        "the Standard Webhooks specification's test vector: its example secret and message id",
	// Documentation showing a credential's shape.
	"docs/api.md": "an example maker API key (mk_3f9c0a1b2c4d_…) in the output of maker keys create",
	// A directory (its name ends in "/"): every file in it.
	"judge/guard/testdata/fuzz/FuzzSecretScan/": "FuzzSecretScan's corpus: inputs that once broke the guard, secret-shaped by nature",
}

// fixture returns why path is a fixture of repoFixtures, or "".
func fixture(path string) string {
	if why := repoFixtures[path]; why != "" {
		return why
	}
	for p, why := range repoFixtures {
		if strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) {
			return why
		}
	}
	return ""
}

// repoFiles lists the repository's tracked files (relative to root): git
// ls-files, or a walk of the tree without .git where git is missing.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output(); err == nil {
		var files []string
		for _, f := range bytes.Split(out, []byte{0}) {
			if len(f) > 0 {
				files = append(files, string(f))
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRepoFalsePositives measures the guard's false positives on this
// repository: every tracked file is read through it as a requester's file
// (ScreenFile) and as text (Redact). None may be withheld or redacted but
// the fixtures listed in repoFixtures, each for its stated reason. Under
// the race detector (make test), which slows the scan tenfold, it reads
// the files where the context rules have the most to read: every file
// that is not Go source (documentation, configuration, manifests, test
// data) and the judge package's own; go test ./judge reads them all.
func TestRepoFalsePositives(t *testing.T) {
	t.Parallel()
	root := "../.."
	files := repoFiles(t, root)
	if len(files) < 100 {
		t.Fatalf("only %d files: not the repository", len(files))
	}
	if raceDetector {
		files = slices.DeleteFunc(files, func(p string) bool {
			return strings.HasSuffix(p, ".go") && !strings.HasPrefix(p, "judge/")
		})
	}
	type finding struct{ path, reason string }
	var (
		mu                 sync.Mutex
		withheld, redacted []finding
		scanned, binary    int
		bytesRead          int64
	)
	work := make(chan string)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for p := range work {
				data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
				if err != nil {
					if os.IsNotExist(err) {
						continue // deleted in the work tree, not yet in the index
					}
					t.Error(err)
					continue
				}
				content := string(data)
				mu.Lock()
				bytesRead += int64(len(data))
				if bytes.IndexByte(data, 0) >= 0 {
					binary++
					mu.Unlock()
					continue
				}
				scanned++
				mu.Unlock()
				reason := ScreenFile(p, content, 16<<20)
				if reason == "" {
					continue // nothing found: Redact leaves the text as it is too
				}
				// The same scan as ScreenFile's, again only for the report.
				res := scanSecrets(Normalize(content), "")
				mu.Lock()
				withheld = append(withheld, finding{p, reason})
				if res.found() {
					var rules []string
					for _, sp := range res.spans {
						if !slices.Contains(rules, sp.rule) {
							rules = append(rules, sp.rule)
						}
					}
					if res.whole != "" {
						rules = append(rules, res.whole)
					}
					redacted = append(redacted, finding{p, strings.Join(rules, ", ") + ": " + snippets(Normalize(content), res.spans)})
				}
				mu.Unlock()
			}
		})
	}
	for _, f := range files {
		work <- f
	}
	close(work)
	wg.Wait()
	falsePositives := len(slices.DeleteFunc(slices.Clone(withheld), func(f finding) bool { return fixture(f.path) != "" }))
	t.Logf("%d tracked files (%d bytes): %d read as text, %d binary skipped; %d withheld (%d redacted as text): %d fixtures, %d false positives",
		len(files), bytesRead, scanned, binary, len(withheld), len(redacted), len(withheld)-falsePositives, falsePositives)
	for _, f := range withheld {
		if why := fixture(f.path); why != "" {
			t.Logf("fixture %s withheld (%s): %s", f.path, why, f.reason)
			continue
		}
		t.Errorf("false positive: %s withheld: %s", f.path, f.reason)
	}
	for _, f := range redacted {
		if fixture(f.path) == "" {
			t.Errorf("false positive: %s redacted by %s", f.path, f.reason)
		}
	}
	for p := range repoFixtures {
		if slices.Contains(files, p) && !strings.HasSuffix(p, "/") && !slices.ContainsFunc(withheld, func(f finding) bool { return f.path == p }) {
			t.Errorf("fixture %s is no longer withheld: remove it from repoFixtures", p)
		}
	}
}

// snippets shows the text around the first findings (for a report).
func snippets(n string, spans []secretSpan) string {
	var out []string
	for _, sp := range spans[:min(len(spans), 4)] {
		a, b := max(0, sp.start-30), min(len(n), sp.end+10)
		out = append(out, strings.ReplaceAll(n[a:sp.start]+"«"+n[sp.start:sp.end]+"»"+n[sp.end:b], "\n", "⏎")+" ("+sp.rule+")")
	}
	return strings.Join(out, " | ")
}
