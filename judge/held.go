package judge

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// Held requests and the models a request may choose.
//
// A request the cost gate holds is stored in the approvals bucket only
// after the secret guard (guardedRequest): files the guard withholds are
// dropped and listed in excluded_files, and the problem, build log,
// constraints and prior-attempt notes are redacted. That copy is what an
// approver sees (maker judge pending, the approval reply) and, once
// approved, what runs: a judge that finds a request id approved runs the
// stored copy, never the one that just arrived, so a tenant cannot swap the
// content (a bigger problem, other files or models) after a person
// approved it.
//
// A held arbitration is stored with its step state redacted
// (guardedArbitration); its candidates hold no secret (one that does is
// refused before the cost gate).

// MaxRequestModels caps the panel models a request may name in
// plugins[0].analysis_models.
const MaxRequestModels = 5

// guardedRequest is req as the secret guard leaves it: what the approvals
// bucket stores for a held request. Screening and redaction are
// deterministic and idempotent, so Assemble on the copy gives the panel
// the same context as on req.
func guardedRequest(req *schemas.BreakGlassRequest, s *Settings) *schemas.BreakGlassRequest {
	g := *req
	g.Requester = guard.Redact(req.Requester)
	g.Problem = guard.Redact(req.Problem)
	g.BuildLog = guard.Redact(req.BuildLog)
	g.Constraints = guard.Redact(req.Constraints)
	g.PriorAttempts = make([]schemas.PriorAttempt, len(req.PriorAttempts))
	for i, at := range req.PriorAttempts {
		g.PriorAttempts[i] = schemas.PriorAttempt{Kind: at.Kind, Note: guard.Redact(at.Note)}
	}
	g.ExcludedFiles = redactExcluded(req.ExcludedFiles)
	g.Files = nil
	for _, f := range req.Files {
		if reason := guard.ScreenFile(f.Path, f.Content, s.MaxFileBytes); reason != "" {
			g.ExcludedFiles = append(g.ExcludedFiles, schemas.ExcludedFile{Path: guard.Redact(f.Path), Reason: reason})
			continue
		}
		g.Files = append(g.Files, f)
	}
	g.Plugins = slices.Clone(req.Plugins)
	return &g
}

// guardedArbitration is req as the approvals bucket stores it: its step
// state redacted, like every text the judge stores. Redaction is
// idempotent, so the approved arbitration's prompt (which redacts the
// state again) is the one it would have had. A state the redaction leaves
// no longer JSON text is stored as a JSON string.
func guardedArbitration(req *schemas.ArbitrationRequest) *schemas.ArbitrationRequest {
	g := *req
	g.State = guard.Redact(req.State)
	if !json.Valid([]byte(g.State)) {
		quoted, err := json.Marshal(g.State)
		if err == nil {
			g.State = string(quoted)
		}
	}
	return &g
}

// displayApproval is a copy of a held request's record fit to show a
// person: its break-glass request passed through the guard again (a
// record stored before holds were guarded holds the raw request), an
// arbitration's step state redacted (again: a record stored before held
// arbitrations were guarded holds the state as the coordinator sent it).
func displayApproval(a *schemas.BreakGlassApproval, s *Settings) *schemas.BreakGlassApproval {
	if a == nil {
		return nil
	}
	c := *a
	if a.Request != nil {
		c.Request = guardedRequest(a.Request, s)
	}
	if a.Arbitration != nil {
		arb := *a.Arbitration
		arb.State = guard.Redact(arb.State)
		c.Arbitration = &arb
	}
	return &c
}

// requestModels checks the panel and judge models a request chose (its
// fusion plugin): at most MaxRequestModels panel models, each one the
// settings configure (listed in models, or named in a panel or as a judge
// model). An unknown model would be priced at default_price and sent with
// the judge's key, so it is refused with the reason.
func (s *Settings) requestModels(panel []string, judgeModel string) string {
	if len(panel) > MaxRequestModels {
		return fmt.Sprintf("too many panel models: the request names %d, at most %d", len(panel), MaxRequestModels)
	}
	var unknown []string
	for _, m := range append(slices.Clone(panel), judgeModel) {
		if !s.configuredModel(m) && !slices.Contains(unknown, m) {
			unknown = append(unknown, m)
		}
	}
	if len(unknown) > 0 {
		return "models not configured in the judge's settings (only configured, priced models may be requested): " + guard.Redact(clip(strings.Join(unknown, ", "), 300))
	}
	return ""
}

// configuredModel reports whether the settings name model: listed in
// models (the defaults list the default panels' prices), or in a panel, the arbitration panel or as a judge model.
func (s *Settings) configuredModel(m string) bool {
	if _, ok := s.Models[m]; ok {
		return true
	}
	if m == s.JudgeModel || m == s.Arbitration.JudgeModel || slices.Contains(s.Arbitration.Panel, m) {
		return true
	}
	for _, p := range s.Panels {
		if slices.Contains(p, m) {
			return true
		}
	}
	return false
}
