package simllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Break-glass and arbitration prompts (package judge). The model
// recognises a panel member's prompt and the judge's prompt by the first
// line of the system message ("makerfleet break-glass panel member",
// "makerfleet break-glass judge", and for an arbitration "makerfleet
// arbitration panel member", "makerfleet arbitration judge") and answers
// with the JSON those prompts ask for:
//
//   - a panel member: a diagnosis naming the problem, an approach naming
//     the member, confidence 0.8, and for an arbitration (its prompt lists
//     "candidate N (votes V): KEY" lines) the candidate with the most votes
//     (ties: the first listed);
//   - the judge: the panel analysis of the "=== member M ===" answers in
//     its prompt (consensus, contradictions between chosen candidates, one
//     unique insight per member), the majority candidate, confidence 0.9;
//     with a fusion plugin in the request (pass-through mode) the plugin's
//     analysis_models stand in for the members.
//
// Suffixes on the requested model name select faults, so one server can
// serve a whole panel with some members misbehaving (several may be
// combined, e.g. "m@slow@fail"):
//
//	@fail     every request gets 500
//	@slow     no answer until the client gives up (or 10 minutes)
//	@badjson  the judge answers with text that is not JSON
//	@lowconf  the judge's confidence is 0.3
//	@dissent  a member picks the candidate with the fewest votes
const (
	panelMarker            = "makerfleet break-glass panel member"
	judgeMarker            = "makerfleet break-glass judge"
	arbitrationPanelMarker = "makerfleet arbitration panel member"
	arbitrationJudgeMarker = "makerfleet arbitration judge"
)

// slowWait bounds how long an @slow model holds a request.
const slowWait = 10 * time.Minute

type bgPrompt struct {
	judge  bool
	user   string
	model  string
	modes  map[string]bool
	fusion []string // analysis_models of a fusion plugin
}

// readBreakGlass recognises a break-glass prompt.
func readBreakGlass(req *chatRequest, body []byte) (*bgPrompt, bool) {
	if len(req.Messages) < 2 || req.Messages[0].Role != "system" || len(req.texts) < 2 {
		return nil, false
	}
	first, _, _ := strings.Cut(req.texts[0], "\n")
	p := &bgPrompt{modes: make(map[string]bool)}
	switch strings.TrimSpace(first) {
	case panelMarker, arbitrationPanelMarker:
	case judgeMarker, arbitrationJudgeMarker:
		p.judge = true
	default:
		return nil, false
	}
	p.user = req.texts[len(req.texts)-1]
	for i := len(req.texts) - 1; i >= 1; i-- { // a retry ends with a correction: the prompt is the first user message
		if req.Messages[i].Role == "user" {
			p.user = req.texts[i]
		}
	}
	name, modes, _ := strings.Cut(req.Model, "@")
	p.model = name
	for _, m := range strings.Split(modes, "@") {
		if m != "" {
			p.modes[m] = true
		}
	}
	var plug struct {
		Plugins []struct {
			ID             string   `json:"id"`
			AnalysisModels []string `json:"analysis_models"`
		} `json:"plugins"`
	}
	if json.Unmarshal(body, &plug) == nil {
		for _, pl := range plug.Plugins {
			if pl.ID == "fusion" {
				p.fusion = pl.AnalysisModels
			}
		}
	}
	return p, true
}

// breakGlassFault serves the @fail and @slow modes; it reports whether it
// answered the request.
func (s *Server) breakGlassFault(w http.ResponseWriter, r *http.Request, p *bgPrompt) bool {
	switch {
	case p.modes["fail"]:
		s.st.serverErrors.Add(1)
		writeError(w, &apiError{status: http.StatusInternalServerError, typ: "server_error",
			message: "The simulated panel member " + p.model + " fails every request (@fail)."})
		return true
	case p.modes["slow"]:
		t := time.NewTimer(slowWait)
		defer t.Stop()
		select {
		case <-t.C:
			s.st.serverErrors.Add(1)
			writeError(w, &apiError{status: http.StatusGatewayTimeout, typ: "server_error", message: "The simulated slow model gave up."})
		case <-r.Context().Done():
			s.st.canceled.Add(1)
		}
		return true
	}
	return false
}

var (
	candidateRE = regexp.MustCompile(`(?m)^candidate (\d+) \(votes (\d+)\): (.*)$`)
	memberRE    = regexp.MustCompile(`(?m)^=== member (.+) ===$`)
	problemRE   = regexp.MustCompile(`(?m)^<<<DATA \S+ problem\n(.*)$`)
)

type candidate struct {
	key   string
	votes int
}

func candidates(text string) []candidate {
	var out []candidate
	for _, m := range candidateRE.FindAllStringSubmatch(text, -1) {
		v, _ := strconv.Atoi(m[2])
		out = append(out, candidate{key: m[3], votes: v})
	}
	return out
}

// top returns the candidate with the most votes (first on ties), or the
// one with the fewest when fewest is set.
func top(cs []candidate, fewest bool) string {
	best := -1
	for i, c := range cs {
		if best < 0 || (!fewest && c.votes > cs[best].votes) || (fewest && c.votes < cs[best].votes) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return cs[best].key
}

// breakGlassReply is the content the model answers p with.
func breakGlassReply(p *bgPrompt) string {
	problem := "the problem"
	if m := problemRE.FindStringSubmatch(p.user); m != nil {
		problem = m[1]
	}
	cs := candidates(p.user)
	if !p.judge {
		conf := 0.8
		if p.modes["dissent"] {
			conf = 0.4
		}
		return encodeJSON(map[string]any{
			"diagnosis":       "simulated diagnosis of: " + clip(problem, 120),
			"approach":        "approach proposed by " + p.model,
			"confidence":      conf,
			"files_to_change": []string{},
			"code_snippets":   map[string]string{},
			"alternatives":    []string{"alternative from " + p.model},
			"risks":           []string{"risk noted by " + p.model},
			"vote_key":        top(cs, p.modes["dissent"]),
		})
	}
	if p.modes["badjson"] {
		return `Here is my synthesis: {"diagnosis": "the panel agrees, mostly", "solution": {"approach": unterminated`
	}
	members, votes := judgeMembers(p)
	counts := make(map[string]int)
	for _, v := range votes {
		if v != "" {
			counts[v]++
		}
	}
	choice := top(cs, false)
	for _, c := range cs { // the members' majority, in candidate order on ties
		if counts[c.key] > counts[choice] {
			choice = c.key
		}
	}
	var contradictions, insights []string
	if len(counts) > 1 {
		contradictions = append(contradictions, fmt.Sprintf("members chose %d different candidates", len(counts)))
	}
	for _, m := range members {
		insights = append(insights, m+": approach proposed by "+m)
	}
	conf := 0.9
	if p.modes["lowconf"] {
		conf = 0.3
	}
	return encodeJSON(map[string]any{
		"diagnosis": "simulated judge diagnosis of: " + clip(problem, 120),
		"solution": map[string]any{
			"approach":        fmt.Sprintf("synthesis of %d panel answers", len(members)),
			"confidence":      conf,
			"files_to_change": []string{},
			"code_snippets":   map[string]string{},
			"vote_key":        choice,
		},
		"alternatives": []string{"the runner-up approach"},
		"risks":        []string{"simulated answers are not real analysis"},
		"panel_analysis": map[string]any{
			"consensus":        []string{fmt.Sprintf("%d of %d members agree on the diagnosis", len(members), len(members))},
			"contradictions":   nonNil(contradictions),
			"partial_coverage": []string{},
			"unique_insights":  nonNil(insights),
			"blind_spots":      []string{"none found by the simulated judge"},
		},
	})
}

// judgeMembers returns the members whose answers the judge's prompt holds
// (or the fusion plugin's analysis models) and each one's chosen vote key.
func judgeMembers(p *bgPrompt) (members, votes []string) {
	if len(p.fusion) > 0 {
		return p.fusion, nil
	}
	locs := memberRE.FindAllStringSubmatchIndex(p.user, -1)
	for i, loc := range locs {
		members = append(members, p.user[loc[2]:loc[3]])
		end := len(p.user)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		block := p.user[loc[1]:end]
		var ans struct {
			VoteKey string `json:"vote_key"`
		}
		if a, b := strings.IndexByte(block, '{'), strings.LastIndexByte(block, '}'); a >= 0 && b > a {
			_ = json.Unmarshal([]byte(block[a:b+1]), &ans)
		}
		votes = append(votes, ans.VoteKey)
	}
	return members, votes
}

// breakGlassChoice is a choice with fixed content, cut at limit tokens.
func breakGlassChoice(content string, limit int) choice {
	c := choice{content: content, finish: "stop", tokens: (len(content) + 3) / 4, outcome: outBreakGlass}
	if limit > 0 && c.tokens > limit {
		c.content, c.tokens, c.finish = content[:4*limit], limit, "length"
	}
	return c
}

func encodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
