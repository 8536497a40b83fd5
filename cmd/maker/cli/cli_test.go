package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/makerfleet/makerfleet/internal/app/bench"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outcome is what one in-process run of Main did.
type outcome struct {
	code           int
	stdout, stderr string
}

// runMain runs the command line in this process, as main does, within
// 60s.
func runMain(t *testing.T, args ...string) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb syncBuffer
	code := Main(ctx, args, &out, &errb)
	return outcome{code, out.String(), errb.String()}
}

// walk calls fn for every command of the tree under root, root included.
func walk(root *cobra.Command, fn func(*cobra.Command)) {
	fn(root)
	for _, c := range root.Commands() {
		walk(c, fn)
	}
}

// commandPath is cmd's path without the program name: the args that run it.
func commandPath(cmd *cobra.Command) []string {
	return strings.Fields(cmd.CommandPath())[1:]
}

// TestUnknownSubcommand: a mistyped subcommand of any command group (one
// with subcommands, root included) exits with the usage code, saying
// "unknown command" and suggesting the command meant; a group alone prints
// its help.
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	groups := 0
	walk(newRoot(&env{}), func(cmd *cobra.Command) {
		if !cmd.HasSubCommands() {
			return
		}
		groups++
		path := commandPath(cmd)
		first := cmd.Commands()[0].Name()
		typo := first[:len(first)-1] // one letter short
		t.Run(strings.Join(append(path, typo), " "), func(t *testing.T) {
			t.Parallel()
			res := runMain(t, append(path, typo)...)
			if res.code != ExitUsage || res.stdout != "" ||
				!strings.HasPrefix(res.stderr, `maker: unknown command "`+typo+`"`) || !strings.Contains(res.stderr, first) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, \"unknown command %q\" suggesting %s on stderr only",
					res.code, res.stdout, res.stderr, ExitUsage, typo, first)
			}
		})
		if cmd.Name() != "judge" { // the judge group is also the role, run bare
			t.Run(strings.Join(path, " "), func(t *testing.T) {
				t.Parallel()
				res := runMain(t, path...)
				if res.code != ExitOK || !strings.Contains(res.stdout, "Available Commands") {
					t.Errorf("exit %d, stdout %q, stderr %q; want the group's help", res.code, res.stdout, res.stderr)
				}
			})
		}
	})
	if groups < 4 { // maker, jobs, dlq, judge
		t.Errorf("found %d command groups, want at least 4", groups)
	}
}

// TestFlagUsageBackticks: pflag reads `name` in a usage string as the
// flag's value placeholder, so a boolean flag with backticks in its usage
// is shown as taking a value (--panel maker judge). Backticks may only
// name a placeholder (one upper-case word) of a flag that takes a value.
func TestFlagUsageBackticks(t *testing.T) {
	t.Parallel()
	flags := 0
	walk(newRoot(&env{}), func(cmd *cobra.Command) {
		check := func(f *pflag.Flag) {
			flags++
			if !strings.Contains(f.Usage, "`") {
				return
			}
			name, _ := pflag.UnquoteUsage(f)
			if f.Value.Type() == "bool" || name != strings.ToUpper(name) || strings.ContainsAny(name, " \t") {
				t.Errorf("%s --%s: usage %q has backticks, shown as --%s %s", cmd.CommandPath(), f.Name, f.Usage, f.Name, name)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.PersistentFlags().VisitAll(check)
	})
	if flags < 100 {
		t.Errorf("checked %d flags; the walk missed commands", flags)
	}
}

// TestREADMENATSFlag: every command line in the README that passes --nats
// is one of a command that has the flag, and the README names every
// command without it where it says which commands take it.
func TestREADMENATSFlag(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	root := newRoot(&env{})
	checked := checkREADMEFlag(t, readme, root, "nats")
	if checked < 8 {
		t.Errorf("checked %d command lines with --nats in the README, want every one (at least 8)", checked)
	}

	var without []string
	walk(root, func(cmd *cobra.Command) {
		if cmd.Runnable() && !cmd.HasSubCommands() && cmd.Flags().Lookup("nats") == nil {
			without = append(without, strings.TrimPrefix(cmd.CommandPath(), root.Name()+" "))
		}
	})
	t.Logf("checked %d README command lines with --nats; commands without it: %v", checked, without)
	i := strings.Index(readme, "Every command that talks to a fleet takes `--nats URL`")
	if i < 0 {
		t.Fatal("README no longer says which commands take --nats")
	}
	sentence, _, _ := strings.Cut(readme[i:], ").")
	for _, name := range without {
		if !strings.Contains(sentence, "`"+name+"`") {
			t.Errorf("%s takes no --nats; the README's %q does not say so", name, sentence)
		}
	}
}

// checkREADMEFlag checks that every command line of readme passing
// --flag is one of a command of root that takes it, and returns how many
// it checked.
func checkREADMEFlag(t *testing.T, readme string, root *cobra.Command, flag string) int {
	t.Helper()
	checked := 0
	for _, line := range strings.Split(readme, "\n") {
		// A command line is a code line, or a `quoted` span or table
		// cell of prose.
		for _, seg := range strings.FieldsFunc(line, func(r rune) bool { return r == '`' || r == '|' }) {
			f := strings.Fields(seg)
			if len(f) < 2 || f[0] != "maker" || !slices.Contains(f, "--"+flag) {
				continue
			}
			cmd, _, err := root.Find(f[1:])
			if err != nil || cmd == root {
				t.Errorf("README: %q is no maker command: %v", seg, err)
				continue
			}
			checked++
			if cmd.Flags().Lookup(flag) == nil {
				t.Errorf("README: %q passes --%s, which %s does not take", seg, flag, cmd.CommandPath())
			}
		}
	}
	return checked
}

// The maker binary collects at DefaultGOGC unless GOGC is set, which it
// leaves alone (not parallel: the collector's target is the process's).
func TestGCDefault(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	if code := Main(context.Background(), []string{"--help"}, io.Discard, io.Discard); code != ExitOK {
		t.Fatalf("maker --help: exit %d", code)
	}
	if got := bench.GCPercent(); got != DefaultGOGC {
		t.Errorf("GOGC unset: the collector's target is %d, want %d", got, DefaultGOGC)
	}
	for _, env := range []string{"100", "off", "50"} {
		debug.SetGCPercent(100)
		t.Setenv("GOGC", env)
		if code := Main(context.Background(), []string{"--help"}, io.Discard, io.Discard); code != ExitOK {
			t.Fatalf("maker --help: exit %d", code)
		}
		if got := bench.GCPercent(); got != 100 {
			t.Errorf("GOGC=%s: maker changed the collector's target to %d; the runtime's reading of GOGC stands", env, got)
		}
	}
}
