package judge_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

const fusionBody = `{
  "model": "openrouter/fusion",
  "plugins": [{"id": "fusion", "model": "judge-x", "analysis_models": ["p1", "p2"]}],
  "messages": [
    {"role": "system", "content": "No Float in compute paths."},
    {"role": "user", "content": "break glass: the parser drops the last byte"}
  ]
}`

func TestFromFusion(t *testing.T) {
	t.Parallel()
	req := judgetest.Request("f-1", "s-f", "placeholder")
	if err := judge.FromFusion([]byte(fusionBody), req); err != nil {
		t.Fatal(err)
	}
	if req.Problem != "break glass: the parser drops the last byte" || req.Constraints != "No Float in compute paths." ||
		len(req.Plugins) != 1 || req.Plugins[0].Model != "judge-x" || !slices.Equal(req.Plugins[0].AnalysisModels, []string{"p1", "p2"}) {
		t.Errorf("request %+v", req)
	}
	for _, bad := range []string{`{"messages": []}`, `{"plugins": [{"id": "web"}], "messages": [{"role": "user", "content": "x"}]}`, `not json`} {
		if err := judge.FromFusion([]byte(bad), judgetest.Request("f-2", "s", "x")); err == nil {
			t.Errorf("FromFusion(%s) accepted", bad)
		}
	}
}

// The fusion shape fans out here: the plugin's models replace the
// configured panel and judge.
func TestFusionShapeFanOut(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	// A request may choose only configured models.
	s.Models = map[string]judge.ModelSettings{"p1": {}, "p2": {}, "judge-x": {}}
	env.StartJudge(s)
	req := judgetest.Request("f-fan", "s-f", "placeholder")
	if err := judge.FromFusion([]byte(fusionBody), req); err != nil {
		t.Fatal(err)
	}
	resp, err := env.Ask(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Mode != "panel" || !slices.Equal(resp.Panel, []string{"p1", "p2"}) || resp.JudgeModel != "judge-x" || len(resp.Members) != 3 {
		t.Errorf("mode %s panel %v judge %s members %d", resp.Mode, resp.Panel, resp.JudgeModel, len(resp.Members))
	}
}

// Pass-through: one fusion-shaped call to the endpoint, which runs panel
// and judge itself.
func TestPassthrough(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	s := judgetest.TestSettings()
	s.Passthrough = &judge.Passthrough{}
	env.StartJudge(s)
	resp, err := env.Ask(judgetest.Request("pt-1", "s-pt", "a crash in the parser"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != schemas.BreakGlassAnswered || resp.Mode != "passthrough" || len(resp.Members) != 1 || resp.Members[0].Model != judge.DefaultPassthroughModel {
		t.Fatalf("response %+v", resp)
	}
	if got := resp.PanelAnalysis.UniqueInsights; len(got) != 3 || !strings.HasPrefix(got[0], "m1:") {
		t.Errorf("the endpoint did not see the panel: %v", got)
	}
	sent := env.Requests.String()
	if n := env.Sim.Stats().Requests; n != 1 || !strings.Contains(sent, `"plugins":[{"id":"fusion","model":"judge","analysis_models":["m1","m2","m3"]}]`) {
		t.Errorf("%d requests; sent %s", n, sent)
	}
	if resp.Cost.ActualUSD <= 0 {
		t.Errorf("cost %+v", resp.Cost)
	}
}

// FromFusion never panics, and a request it accepts names the fusion
// plugin and a problem.
func FuzzFromFusion(f *testing.F) {
	f.Add([]byte(fusionBody))
	f.Add([]byte(`{"plugins": [{"id": "fusion"}], "messages": [{"role": "user", "content": "x"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req := judgetest.Request("fz", "s", "x")
		if err := judge.FromFusion(body, req); err != nil {
			return
		}
		if len(req.Plugins) != 1 || req.Plugins[0].ID != "fusion" || strings.TrimSpace(req.Problem) == "" {
			t.Fatalf("accepted %s as %+v", body, req)
		}
	})
}
