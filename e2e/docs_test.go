package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/testkit"
)

// The documentation's shell examples marked runnable (a fence opened with
// "```sh runnable") are run as written, so they cannot drift from the
// binary: README.md's and docs/*.md's, each file's blocks in order in one
// working directory, as in one terminal (a block's exports carry to the
// next; services it starts with & keep running), against servers of the
// test's own. The docs name
// the canonical local addresses; the test maps each to its own server or
// free port (docAddrs), and puts the maker it built first on PATH.

// docBlock is one runnable block: its file, first line and text.
type docBlock struct {
	file string
	line int
	text string
}

// runnableBlocks returns the blocks of a Markdown file whose fence's info
// string is a shell language followed by the word runnable.
func runnableBlocks(file string, data []byte) ([]docBlock, error) {
	var (
		blocks []docBlock
		cur    *docBlock
		body   strings.Builder
		fence  string
		indent int // the open fence's indentation
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && strings.HasPrefix(trimmed, "```"):
			fence, indent = "```", len(line)-len(trimmed)
			info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
			if len(info) >= 2 && (info[0] == "sh" || info[0] == "bash") && info[1] == "runnable" {
				cur = &docBlock{file: file, line: n + 1}
				body.Reset()
			}
		case fence != "" && strings.TrimSpace(trimmed) == fence:
			fence = ""
			if cur != nil {
				cur.text = body.String()
				blocks = append(blocks, *cur)
				cur = nil
			}
		case cur != nil:
			// An indented fence (in a list) indents its lines as much.
			body.WriteString(strings.TrimPrefix(line, strings.Repeat(" ", min(indent, len(line)-len(trimmed)))))
			body.WriteByte('\n')
		}
	}
	if fence != "" {
		return nil, fmt.Errorf("%s: a fence is never closed", file)
	}
	return blocks, sc.Err()
}

// failedReport finds a report that did not solve its task: a job's report
// header in the human format, or a --json report's state.
var failedReport = regexp.MustCompile(`(?m)^job \S+ .*\b(NO_CONSENSUS|UNSOLVED|FAILED|CANCELLED)\s*$|"state": ?"(no_consensus|unsolved|failed|cancelled)"`)

// TestDocExamples runs every runnable block of the docs. A block fails on
// any command's failure (bash -e, pipefail) and on a report of a job that
// was not solved: an example that runs a job shows it solved.
func TestDocExamples(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	total := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		blocks, err := runnableBlocks(rel, data)
		if err != nil {
			t.Fatal(err)
		}
		if len(blocks) == 0 {
			continue
		}
		total += len(blocks)
		t.Run(rel, func(t *testing.T) { runDocBlocks(t, root, blocks) })
	}
	if total == 0 {
		t.Fatal("no runnable blocks in README.md or docs/: the marker is \"```sh runnable\"")
	}
}

// docAddrs maps the docs' canonical addresses to the test's: its NATS and
// Redis, and free ports for the API (8000), the simulated model (8080) and
// metrics (9090).
func docAddrs(t *testing.T, svc *services) *strings.Replacer {
	t.Helper()
	port := func() string {
		p, err := testkit.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	return strings.NewReplacer(
		"nats://127.0.0.1:4222", svc.natsURL,
		"redis://127.0.0.1:6379/0", svc.redisURL,
		"127.0.0.1:8000", port(),
		"127.0.0.1:8080", port(),
		"127.0.0.1:9090", port(),
	)
}

func runDocBlocks(t *testing.T, root string, blocks []docBlock) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not found")
	}
	for _, tool := range []string{"curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("MAKER_REQUIRE_REDIS") == "1" { // CI: .ci/run installs them
				t.Fatalf("%s not found: the docs' examples use it", tool)
			}
			t.Skipf("%s not found: the docs' examples use it", tool)
		}
	}
	svc := startServices(t, true)
	addrs := docAddrs(t, svc)
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(work, "examples")); err != nil {
		t.Fatal(err)
	}
	env := append(childEnv(), "PATH="+filepath.Dir(makerBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var groups []int
	t.Cleanup(func() {
		// Background services a block started (`&`) live in its group.
		for _, g := range groups {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	for _, b := range blocks {
		out := filepath.Join(work, fmt.Sprintf(".block-%d.log", b.line))
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		// As one terminal session: what a block exports, the next has.
		script := "if [ -f .doc-env.sh ]; then . ./.doc-env.sh; fi\n" + addrs.Replace(b.text) + "\nexport -p > .doc-env.sh\n"
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = work, env, f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			f.Close()
			t.Fatal(err)
		}
		groups = append(groups, cmd.Process.Pid)
		// A file, not a pipe, takes the output: Wait then returns when
		// bash exits, though services it started in the background still
		// write to it.
		timer := time.AfterFunc(4*time.Minute, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		runErr := cmd.Wait()
		timer.Stop()
		f.Close()
		log, _ := os.ReadFile(out)
		if runErr != nil {
			t.Fatalf("%s:%d: the example failed (%v); its output:\n%s", b.file, b.line, runErr, log)
		}
		if m := failedReport.Find(log); m != nil {
			t.Fatalf("%s:%d: the example ran a job that was not solved (%s); its output:\n%s", b.file, b.line, m, log)
		}
		t.Logf("%s:%d: ran", b.file, b.line)
	}
}

// TestRunnableBlocks: the parser finds marked blocks only, in lists too.
func TestRunnableBlocks(t *testing.T) {
	doc := "# x\n```sh\nnot me\n```\n- item\n  ```sh runnable\n  echo a\n    echo b\n  ```\n```bash runnable extra\necho c\n```\n```\n```sh runnable\n```\n"
	blocks, err := runnableBlocks("x.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].text != "echo a\n  echo b\n" || blocks[0].line != 7 || blocks[1].text != "echo c\n" {
		t.Errorf("blocks %+v", blocks)
	}
	if _, err := runnableBlocks("y.md", []byte("```sh runnable\necho\n")); err == nil {
		t.Error("an unclosed fence passed")
	}
}
