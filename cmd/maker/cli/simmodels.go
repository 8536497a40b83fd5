package cli

import (
	"slices"

	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/judge"
)

// simllmDefaultModels are the models `maker simllm` serves without
// --model: the voters' default (simllm.DefaultModel), then the judge's
// default panels, judge model and pass-through model, so a fleet whose
// judge keeps its defaults runs against the simulated model as it is.
// Any other name gets 404 model_not_found, as OpenAI answers.
func simllmDefaultModels() []string {
	models := []string{simllm.DefaultModel}
	add := func(m string) {
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	panels := judge.DefaultPanels()
	kinds := make([]string, 0, len(panels))
	for k := range panels {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		for _, m := range panels[k] {
			add(m)
		}
	}
	add(judge.DefaultJudgeModel)
	add(judge.DefaultPassthroughModel)
	return models
}

// simllmModels turns --model values into the served models: the first
// name other than simllm.AnyModel is listed first (simllm.DefaultModel
// when there is none).
func simllmModels(values []string) (first string, all []string) {
	first = simllm.DefaultModel
	for _, m := range values {
		if m != simllm.AnyModel {
			first = m
			break
		}
	}
	return first, values
}
