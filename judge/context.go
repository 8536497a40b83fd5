package judge

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// Context assembly, in two halves. The requester (maker breakglass, maker
// mcp) reads files with ReadFiles, confined to its configured root; the
// judge re-screens whatever arrives (Assemble), because a request may come
// from anywhere. Text inside files is data: the prompts fence it between
// markers with a per-request nonce and tell the models never to follow
// instructions inside; the judge itself never acts on it (no file named
// inside a file or log is ever read).

// ReadFiles reads the named files for a request, confined to root: a path
// with a ".." element, an absolute path outside root, a symlink that
// resolves outside root, anything but a regular file, a file over maxBytes
// and a credential-like file (see secrets.go) are withheld and listed in
// excluded with the reason, never read into files. An error is returned
// only when root itself is unusable.
func ReadFiles(root string, paths []string, maxBytes int) (files []schemas.ContextFile, excluded []schemas.ExcludedFile, err error) {
	r, err := openRoot(root)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range paths {
		rel, content, reason := r.read(p, maxBytes, false)
		if reason != "" {
			excluded = append(excluded, schemas.ExcludedFile{Path: p, Reason: reason})
			continue
		}
		files = append(files, schemas.ContextFile{Path: rel, Content: content})
	}
	return files, excluded, nil
}

// ReadText reads one text file (a build log, a constraints file) under the
// same rules as ReadFiles, except that a file over maxBytes keeps its last
// maxBytes (the end of a log matters most). It returns ErrBadFile with the
// reason when the file is withheld.
func ReadText(root, p string, maxBytes int) (string, error) {
	r, err := openRoot(root)
	if err != nil {
		return "", err
	}
	_, content, reason := r.read(p, maxBytes, true)
	if reason != "" {
		return "", fmt.Errorf("%w: %s: %s", ErrBadFile, p, reason)
	}
	return content, nil
}

type rootDir struct{ abs, real string }

func openRoot(root string) (rootDir, error) {
	if root == "" {
		root = "."
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return rootDir{}, fmt.Errorf("judge: root %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return rootDir{}, fmt.Errorf("judge: root %s: %w", root, err)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return rootDir{}, fmt.Errorf("judge: root %s is not a directory", root)
	}
	return rootDir{abs: abs, real: real}, nil
}

// inside reports whether p (absolute, clean) is root or below it.
func inside(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// read returns p's path relative to the root (slash-separated) and its
// text, or why it is withheld.
func (r rootDir) read(p string, maxBytes int, tail bool) (rel, content, reason string) {
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return "", "", "path leaves the root (..)"
		}
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(r.abs, p)
	}
	abs = filepath.Clean(abs)
	if !inside(r.abs, abs) && !inside(r.real, abs) {
		return "", "", "outside the root"
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", "", "cannot be read (missing or unreadable)"
	}
	if !inside(r.real, real) {
		return "", "", "outside the root (symlink)"
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() {
		return "", "", "not a regular file"
	}
	relPath, err := filepath.Rel(r.real, real)
	if err != nil {
		return "", "", "outside the root"
	}
	// The name asked for and the name it resolves to are both screened.
	if lexical, err := filepath.Rel(r.abs, abs); err == nil && !strings.HasPrefix(lexical, "..") {
		if pat, ok := guard.CredentialName(lexical); ok {
			return "", "", "credential file name (" + pat + ")"
		}
		relPath = lexical
	}
	if pat, ok := guard.CredentialName(real); ok {
		return "", "", "credential file name (" + pat + ")"
	}
	if fi.Size() > int64(maxBytes) && !tail {
		return "", "", fmt.Sprintf("larger than %d bytes", maxBytes)
	}
	data, err := readCapped(real, fi.Size(), maxBytes)
	if err != nil {
		return "", "", "cannot be read"
	}
	if !utf8.Valid(data) {
		data = []byte(strings.ToValidUTF8(string(data), "\uFFFD"))
	}
	rel = filepath.ToSlash(relPath)
	if reason := guard.ScreenFile(rel, string(data), maxBytes); reason != "" {
		return "", "", reason
	}
	return rel, string(data), ""
}

// readCapped reads the last maxBytes of the file.
func readCapped(name string, size int64, maxBytes int) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > int64(maxBytes) {
		if _, err := f.Seek(size-int64(maxBytes), io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, int64(maxBytes)))
}

// Assembled is the context the panel and the judge see.
type Assembled struct {
	// System and User are the panel members' prompt.
	System, User string
	// Problem is the redacted problem statement (an arbitration's: a line
	// naming the step).
	Problem string
	// Excluded lists files withheld, by the requester or here.
	Excluded []schemas.ExcludedFile
	// Nonce fences data in the prompts.
	Nonce string
	// judgeSystem is the judge's system prompt; judgeUser its user prompt
	// around the panel's answers.
	judgeSystem string
	judgeUser   func([]memberAnswer) string
}

// Assemble builds the panel and judge prompts of req (of problem type
// typ): the problem, prior attempts, constraints, files, build log and
// earlier break-glass attempts of the session (history, from the audit
// trail). Every file is screened again; every text is redacted; files
// beyond MaxContextBytes or MaxContextTokens are withheld, last first.
func Assemble(req *schemas.BreakGlassRequest, typ string, history []schemas.BreakGlassAudit, s *Settings) Assembled {
	a := Assembled{
		Problem:  guard.Redact(strings.TrimSpace(req.Problem)),
		Excluded: redactExcluded(req.ExcludedFiles),
		Nonce:    newNonce(),
	}
	var files []schemas.ContextFile
	buildLog := tailBytes(guard.Redact(req.BuildLog), s.MaxContextBytes/2)
	budget := s.MaxContextBytes - len(buildLog) - min(len(req.Constraints), s.MaxFileBytes)
	for _, f := range req.Files {
		if reason := guard.ScreenFile(f.Path, f.Content, s.MaxFileBytes); reason != "" {
			a.Excluded = append(a.Excluded, schemas.ExcludedFile{Path: guard.Redact(f.Path), Reason: reason})
			continue
		}
		if len(f.Content) > budget {
			a.Excluded = append(a.Excluded, schemas.ExcludedFile{Path: guard.Redact(f.Path), Reason: "over the context size cap"})
			continue
		}
		budget -= len(f.Content)
		files = append(files, f)
	}
	for {
		a.System = panelSystemPrompt(a.Nonce)
		a.User = panelUserPrompt(req, typ, a.Problem, files, buildLog, history, a.Nonce)
		if EstimateTokens(a.System)+EstimateTokens(a.User) <= s.MaxContextTokens {
			break
		}
		if len(files) > 0 {
			last := files[len(files)-1]
			a.Excluded = append(a.Excluded, schemas.ExcludedFile{Path: guard.Redact(last.Path), Reason: "over the context token cap"})
			files = files[:len(files)-1]
			continue
		}
		if buildLog != "" {
			buildLog = tailBytes(buildLog, len(buildLog)/2)
			continue
		}
		break // the problem alone is over the cap: the cost gate decides
	}
	a.judgeSystem = judgeSystemPrompt(a.Nonce)
	a.judgeUser = func(answers []memberAnswer) string { return judgeUserPrompt(req, typ, a.Problem, a.Nonce, answers) }
	return a
}

// tailBytes keeps the last n bytes of s, on a rune boundary.
func tailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

func newNonce() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("judge: no randomness: " + err.Error()))
	}
	return hex.EncodeToString(b)
}

// fence wraps data between nonce markers.
func fence(b *strings.Builder, nonce, label, data string) {
	fmt.Fprintf(b, "<<<DATA %s %s\n%s\nDATA %s>>>\n", nonce, label, strings.TrimRight(data, "\n"), nonce)
}

// redactExcluded copies a list of withheld files with their names
// redacted: the answer echoes the list, and a token can be a file name.
func redactExcluded(in []schemas.ExcludedFile) []schemas.ExcludedFile {
	if len(in) == 0 {
		return nil
	}
	out := make([]schemas.ExcludedFile, 0, len(in))
	for _, f := range in {
		out = append(out, schemas.ExcludedFile{Path: guard.Redact(f.Path), Reason: guard.Redact(f.Reason)})
	}
	return out
}
