package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/schemas"
)

// The job tools of maker mcp: submit_job, job_status and job_result, in
// the server's tenant (the Jobs port's: --tenant, or the API key's). Their input
// schemas are plain objects (no null unions, which some agents' tool
// callers mishandle); their results are JSON, as structuredContent and
// the same object as the text, described by their output schemas. None of
// them waits: submit_job returns once the job is queued, job_result says
// "not finished" at once.

type submitJobArgs struct {
	Task              string         `json:"task" jsonschema:"The task: a built-in (hanoi) or a registered task spec's name"`
	TaskVersion       string         `json:"task_version,omitempty" jsonschema:"A registered task spec's version (default: the latest)"`
	Params            map[string]any `json:"params" jsonschema:"The task's params, a JSON object (hanoi: {\"disks\": N})"`
	K                 int            `json:"k,omitempty" jsonschema:"Voting margin: a step is decided when one answer leads every other by k valid votes (3 or 4 suits most tasks); left out, the fleet plans it for the task's steps (the job's status and view say which)"`
	Seed              int64          `json:"seed,omitempty" jsonschema:"Seed: a job is reproducible from it (default 0)"`
	JobID             string         `json:"job_id,omitempty" jsonschema:"Job id (default: generated); the same job submitted again under it is a no-op"`
	BudgetUSD         float64        `json:"budget_usd,omitempty" jsonschema:"The most the job may spend, in USD, at the fleet's prices (every model it may ask must have one); the job pauses as budget_exhausted rather than go over"`
	Priority          int            `json:"priority,omitempty" jsonschema:"Priority among this tenant's jobs, 0 to 9 (higher first)"`
	MaxSamplesPerStep int            `json:"max_samples_per_step,omitempty" jsonschema:"Most samples one step may draw before the job ends as no_consensus (default 100)"`
	SpeculationDepth  int            `json:"speculation_depth,omitempty" jsonschema:"Sample up to this many steps ahead of the open one from a guess of each winner, for speed (0: off, the default; at most 64); decisions are unchanged"`
	ReliabilityTarget float64        `json:"reliability_target,omitempty" jsonschema:"Adaptive k: the wanted chance that every step is right, in (0, 1); each step's k is chosen from the job's own votes (k is the start); the report's receipt shows the k schedule and the bound achieved"`
}

type jobArgs struct {
	JobID string `json:"job_id" jsonschema:"The job's id, as submit_job returned it"`
}

const (
	submitJobDescription = `Submit a long LLM task to the makerfleet fleet, which solves it step by step by MAKER voting (first-to-ahead-by-k). Returns the job's id at once; follow it with job_status and read its report with job_result. The job is checked completely first (task, params, every field): an invalid one is refused with the reason, and nothing is queued.`
	jobStatusDescription = `A submitted job's state (queued, running, paused, budget_exhausted, or a final state: solved, unsolved, no_consensus, failed, cancelled) and progress: steps done of total, samples, errors, cost so far.`
	jobResultDescription = `A finished job's report: whether it was solved, steps, errors, samples and votes, cost, its trace hash and final state. A job that has not finished yet is a tool error naming its state: call job_status, and again later.`
)

// addJobTools adds the job tools to srv, acting through c.
func addJobTools(srv *sdk.Server, c Jobs) error {
	submitSchema, err := inputSchema[submitJobArgs]()
	if err != nil {
		return err
	}
	jobSchema, err := inputSchema[jobArgs]()
	if err != nil {
		return err
	}
	submitted, err := jsonschema.For[client.Submitted](nil)
	if err != nil {
		return fmt.Errorf("mcp: output schema: %w", err)
	}
	status, err := outputSchema(schemas.KindJobStatus)
	if err != nil {
		return err
	}
	report, err := outputSchema(schemas.KindJobReport)
	if err != nil {
		return err
	}
	t := &mcpJobs{c: c}
	sdk.AddTool(srv, &sdk.Tool{Name: "submit_job", Description: submitJobDescription, InputSchema: submitSchema, OutputSchema: submitted}, t.submit)
	sdk.AddTool(srv, &sdk.Tool{Name: "job_status", Description: jobStatusDescription, InputSchema: jobSchema, OutputSchema: status}, t.status)
	sdk.AddTool(srv, &sdk.Tool{Name: "job_result", Description: jobResultDescription, InputSchema: jobSchema, OutputSchema: report}, t.result)
	return nil
}

type mcpJobs struct{ c Jobs }

// submit is submit_job. A refused job (invalid, or its id taken by
// another job) is a tool error with the reason; so is a fleet that cannot
// be reached, which the agent may retry.
func (t *mcpJobs) submit(ctx context.Context, _ *sdk.CallToolRequest, args submitJobArgs) (*sdk.CallToolResult, any, error) {
	params, err := json.Marshal(args.Params)
	if err != nil || args.Params == nil {
		return toolError("invalid job: params must be a JSON object"), nil, nil
	}
	spec := schemas.JobSpec{
		Task: args.Task, TaskVersion: args.TaskVersion, Params: params, K: args.K, Seed: args.Seed, JobID: args.JobID,
		BudgetUSD: args.BudgetUSD, Priority: args.Priority, MaxSamplesPerStep: args.MaxSamplesPerStep,
		SpeculationDepth: args.SpeculationDepth, ReliabilityTarget: args.ReliabilityTarget,
	}
	sub, err := t.c.Submit(ctx, spec)
	if err != nil {
		return toolError(jobToolError("submit failed", err)), nil, nil
	}
	return toolJSON(sub)
}

// status is job_status.
func (t *mcpJobs) status(ctx context.Context, _ *sdk.CallToolRequest, args jobArgs) (*sdk.CallToolResult, any, error) {
	st, err := t.c.Status(ctx, "", args.JobID)
	if err != nil {
		return toolError(jobToolError("status failed", err)), nil, nil
	}
	return toolJSON(st)
}

// result is job_result.
func (t *mcpJobs) result(ctx context.Context, _ *sdk.CallToolRequest, args jobArgs) (*sdk.CallToolResult, any, error) {
	rep, err := t.c.Result(ctx, "", args.JobID)
	if err != nil {
		return toolError(jobToolError("no report", err)), nil, nil
	}
	return toolJSON(rep)
}

// jobToolError words a client error for the calling model.
func jobToolError(what string, err error) string {
	switch {
	case errors.Is(err, client.ErrNotFinished):
		return "not finished: " + err.Error()
	case errors.Is(err, client.ErrNotFound):
		return "unknown job: " + err.Error()
	case errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrConflict):
		return "invalid job: " + err.Error()
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// toolJSON returns v as the result: the SDK validates it against the
// tool's output schema and sends it as structuredContent and as the text.
func toolJSON(v any) (*sdk.CallToolResult, any, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	return nil, json.RawMessage(body), nil
}
