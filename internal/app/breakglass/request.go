// Package breakglass turns what a person (maker breakglass) or an agent
// (maker mcp's break_glass tool) gives into a break-glass request: context
// files read only under a root, credential-like ones withheld and listed,
// AGENTS.md as the project's constraints, the message size checked. It
// reads files with the judge's own guard (judge.ReadFiles), so it sits in
// the top layer.
package breakglass

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

// Caps on what the requester reads for context; the judge caps again.
const (
	maxContextFileBytes = 64 << 10
	maxLogBytes         = 128 << 10
)

// Input is what a person (maker breakglass) or an agent (the MCP tool)
// gives for a break-glass request.
type Input struct {
	Problem     string
	ProblemType string
	Files       []string
	LogPath     string
	Constraints string // path; "" reads AGENTS.md from the root when present
	BudgetUSD   float64
	Tried       map[string]string
	Session     string
	Tenant      string
	ID          string
	Requester   string
	Root        string
	FusionBody  []byte // an OpenRouter fusion-shaped request, instead of Problem
	// Parent, when set, marks the request as made from inside the panel of
	// that request id, which the judge refuses (panels never open panels);
	// the CLI reads it from $MAKER_BREAKGLASS_PARENT.
	Parent string
}

// Build turns in into a request, reading context under in.Root.
// Withheld files are listed in the request (the judge audits them) and
// returned as warnings. Errors are the caller's input errors.
func Build(in Input) (*schemas.BreakGlassRequest, []string, error) {
	if in.ProblemType != "" && !schemas.ValidProblemType(in.ProblemType) {
		return nil, nil, fmt.Errorf("problem type %q is not one of %s", in.ProblemType, strings.Join(schemas.ProblemTypes(), ", "))
	}
	if math.IsNaN(in.BudgetUSD) || math.IsInf(in.BudgetUSD, 0) || in.BudgetUSD < 0 {
		return nil, nil, fmt.Errorf("budget must be a number >= 0, got %v", in.BudgetUSD)
	}
	req := &schemas.BreakGlassRequest{
		Header:      schemas.NewHeader(schemas.KindBreakGlassRequest),
		RequestID:   in.ID,
		Tenant:      in.Tenant,
		Session:     in.Session,
		Requester:   in.Requester,
		Problem:     in.Problem,
		ProblemType: in.ProblemType,
		BudgetUSD:   in.BudgetUSD,
		SubmittedAt: time.Now().UTC(),
		// The recursion guard: see Input.Parent.
		ParentRequestID: in.Parent,
	}
	if req.RequestID == "" {
		req.RequestID = judgeclient.NewRequestID("bg")
	}
	for _, kind := range schemas.RequiredAttempts() {
		if note := strings.TrimSpace(in.Tried[kind]); note != "" {
			req.PriorAttempts = append(req.PriorAttempts, schemas.PriorAttempt{Kind: kind, Note: note})
		}
	}
	for kind := range in.Tried {
		if !slices.Contains(schemas.RequiredAttempts(), kind) {
			return nil, nil, fmt.Errorf("prior attempt %q is not one of %s", kind, strings.Join(schemas.RequiredAttempts(), ", "))
		}
	}
	if in.FusionBody != nil {
		if err := judge.FromFusion(in.FusionBody, req); err != nil {
			return nil, nil, err
		}
	}
	files, excluded, err := judge.ReadFiles(in.Root, in.Files, maxContextFileBytes)
	if err != nil {
		return nil, nil, err
	}
	req.Files, req.ExcludedFiles = files, excluded
	var warnings []string
	for _, x := range excluded {
		warnings = append(warnings, fmt.Sprintf("withheld %s: %s", x.Path, x.Reason))
	}
	if in.LogPath != "" {
		if req.BuildLog, err = judge.ReadText(in.Root, in.LogPath, maxLogBytes); err != nil {
			return nil, nil, err
		}
	}
	constraints := in.Constraints
	if constraints == "" {
		if _, err := os.Stat(filepath.Join(rootOrDot(in.Root), "AGENTS.md")); err == nil {
			constraints = "AGENTS.md"
		}
	}
	if constraints != "" {
		c, err := judge.ReadText(in.Root, constraints, maxContextFileBytes)
		if err != nil {
			return nil, nil, err
		}
		req.Constraints = strings.TrimSpace(strings.Join([]string{req.Constraints, c}, "\n\n"))
	}
	data, err := schemas.Encode(req)
	if err != nil {
		return nil, nil, err
	}
	if len(data) > schemas.MaxMessageBytes {
		return nil, nil, fmt.Errorf("the request is %d bytes, over the %d-byte message limit: send fewer or smaller files", len(data), schemas.MaxMessageBytes)
	}
	return req, warnings, nil
}

func rootOrDot(root string) string {
	if root == "" {
		return "."
	}
	return root
}
