package simllm

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func bgBody(t testing.TB, model, system, user string, extra map[string]any) string {
	t.Helper()
	body := map[string]any{"model": model, "temperature": 0.2, "messages": []map[string]string{
		{"role": "system", "content": system}, {"role": "user", "content": user}}}
	for k, v := range extra {
		body[k] = v
	}
	return mustJSON(t, body)
}

const bgCandidates = "CANDIDATES:\n<<<DATA n1 candidates\ncandidate 1 (votes 40): A\ncandidate 2 (votes 45): B\ncandidate 3 (votes 5): C\nDATA n1>>>\n"

func TestBreakGlassPanelAndJudge(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{})
	user := "PROBLEM (type code_bug):\n<<<DATA n1 problem\nbreak glass: the parser drops the last byte\nDATA n1>>>\n" + bgCandidates
	var member struct {
		Diagnosis  string  `json:"diagnosis"`
		Confidence float64 `json:"confidence"`
		VoteKey    string  `json:"vote_key"`
	}
	// A break-glass member: no candidates, no vote.
	content := mustChat(t, s, bgBody(t, "m1", panelMarker+"\nrest", strings.TrimSuffix(user, bgCandidates), nil)).Choices[0].Message.Content
	if err := json.Unmarshal([]byte(content), &member); err != nil {
		t.Fatalf("member answer is not JSON: %v\n%s", err, content)
	}
	if member.VoteKey != "" || member.Confidence != 0.8 || !strings.Contains(member.Diagnosis, "parser drops the last byte") {
		t.Errorf("break-glass member answer %+v", member)
	}
	// An arbitration member picks the candidate with the most votes.
	content = mustChat(t, s, bgBody(t, "m1", arbitrationPanelMarker+"\nrest", user, nil)).Choices[0].Message.Content
	if err := json.Unmarshal([]byte(content), &member); err != nil || member.VoteKey != "B" || member.Confidence != 0.8 {
		t.Errorf("arbitration member answer %+v (%v)", member, err)
	}
	content = mustChat(t, s, bgBody(t, "m2@dissent", arbitrationPanelMarker, user, nil)).Choices[0].Message.Content
	if !strings.Contains(content, `"vote_key":"C"`) {
		t.Errorf("dissenting member: %s", content)
	}

	// Two members chose A, one B: the judge follows the majority.
	judgeUser := "PROBLEM (type code_bug):\n<<<DATA n1 problem\nbreak glass: x\nDATA n1>>>\n" + bgCandidates +
		"PANEL ANSWERS (3):\n=== member a ===\n<<<DATA n1 answer of a\n{\"vote_key\":\"A\"}\nDATA n1>>>\n" +
		"=== member b ===\n<<<DATA n1 answer of b\n{\"vote_key\":\"A\"}\nDATA n1>>>\n" +
		"=== member c ===\n<<<DATA n1 answer of c\n{\"vote_key\":\"B\"}\nDATA n1>>>\n"
	var judged struct {
		Solution struct {
			Confidence float64 `json:"confidence"`
			VoteKey    string  `json:"vote_key"`
		} `json:"solution"`
		PanelAnalysis struct {
			Contradictions []string `json:"contradictions"`
			UniqueInsights []string `json:"unique_insights"`
		} `json:"panel_analysis"`
	}
	content = mustChat(t, s, bgBody(t, "j", arbitrationJudgeMarker, judgeUser, nil)).Choices[0].Message.Content
	if err := json.Unmarshal([]byte(content), &judged); err != nil {
		t.Fatalf("judge answer is not JSON: %v\n%s", err, content)
	}
	if judged.Solution.VoteKey != "A" || judged.Solution.Confidence != 0.9 || len(judged.PanelAnalysis.UniqueInsights) != 3 || len(judged.PanelAnalysis.Contradictions) != 1 {
		t.Errorf("judge answer %s", content)
	}
	content = mustChat(t, s, bgBody(t, "j@lowconf", arbitrationJudgeMarker, judgeUser, nil)).Choices[0].Message.Content
	if !strings.Contains(content, `"confidence":0.3`) {
		t.Errorf("lowconf judge: %s", content)
	}
	content = mustChat(t, s, bgBody(t, "j@badjson", judgeMarker, judgeUser, nil)).Choices[0].Message.Content
	if json.Valid([]byte(content)) {
		t.Errorf("badjson judge answered JSON: %s", content)
	}
	// Pass-through: the fusion plugin's analysis models are the panel.
	content = mustChat(t, s, bgBody(t, "openrouter/fusion", arbitrationJudgeMarker, user, map[string]any{
		"plugins": []map[string]any{{"id": "fusion", "model": "j", "analysis_models": []string{"p1", "p2"}}}})).Choices[0].Message.Content
	if !strings.Contains(content, "p1: approach") || !strings.Contains(content, `"vote_key":"B"`) {
		t.Errorf("fusion answer: %s", content)
	}
	if st := s.Stats(); st.BreakGlass != 7 || st.Choices != 7 {
		t.Errorf("stats %+v", st)
	}
}

func TestBreakGlassFaults(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{})
	if w := post(s, bgBody(t, "m@fail", panelMarker, "PROBLEM", nil)); w.Code != http.StatusInternalServerError {
		t.Errorf("@fail: status %d", w.Code)
	}
	// @slow waits for the client; a request whose context is already
	// done returns at once, counted canceled.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(bgBody(t, "m@slow", panelMarker, "PROBLEM", nil)))
	s.ServeHTTP(httptest.NewRecorder(), r)
	if st := s.Stats(); st.Canceled != 1 || st.ServerErrors != 1 {
		t.Errorf("stats %+v", st)
	}
	// A system prompt without the marker is not a break-glass prompt.
	if c := mustChat(t, s, bgBody(t, "m@fail", "you are helpful", "hi", nil)); len(c.Choices) != 1 {
		t.Errorf("choices %d", len(c.Choices))
	}
}
