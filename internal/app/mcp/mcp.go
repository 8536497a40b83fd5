// Package mcp is maker mcp's server: the break_glass tool, which asks the
// judges' panel, and the job tools (submit_job, job_status, job_result),
// served over MCP to agents. It reaches the fleet through two ports the CLI
// fills, on NATS or through the HTTP API; the CLI keeps the command, its
// flags and the stdio transport.
package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/app/breakglass"
	"github.com/makerfleet/makerfleet/schemas"
)

// Judges asks the judges' panel for break_glass.
type Judges interface {
	// Ask sends req and waits for its final answer: the response and nil,
	// or for a refused, denied or failed one the response and its error;
	// a nil response when it could not ask. onHeld hears of a request held
	// for a person's approval.
	Ask(ctx context.Context, req *schemas.BreakGlassRequest, onHeld func(*schemas.BreakGlassResponse)) (*schemas.BreakGlassResponse, error)
}

// Jobs is the job tools' fleet. A tenant "" is the port's own.
type Jobs interface {
	Submit(ctx context.Context, spec schemas.JobSpec) (client.Submitted, error)
	Status(ctx context.Context, tenant, job string) (schemas.JobStatus, error)
	Result(ctx context.Context, tenant, job string) (schemas.JobReport, error)
}

// Config is what the server needs.
type Config struct {
	// Judges are asked for break glass. Required.
	Judges Judges
	// Jobs, when set, adds the job tools, acting in its own tenant.
	Jobs Jobs
	// Root is the only directory context files are read from; Session the
	// default session for the per-session limits; Tenant and Requester
	// what break_glass requests carry.
	Root, Session, Tenant, Requester string
	// Parent marks every request as made inside that request's panel
	// (breakglass.Input.Parent). Default "": none.
	Parent string
	// Timeout bounds one break_glass call's wait.
	Timeout time.Duration
	// ProgressEvery is how often a waiting call sends a progress
	// notification when the client asked for them. Default
	// DefaultProgressInterval.
	ProgressEvery time.Duration
	// Version is the server's version in the MCP handshake.
	Version string
}

// breakGlassArgs are the break_glass tool's parameters: the seed design's
// (problem, context_files, problem_type, budget) plus what the trigger
// protocol needs (tried), the session and the request id.
type breakGlassArgs struct {
	Problem      string   `json:"problem" jsonschema:"The specific problem statement; must start with 'break glass:'"`
	ContextFiles []string `json:"context_files,omitempty" jsonschema:"Specific files to include in context, relative to the server's root; credential-like files are withheld and listed in the answer's excluded_files"`
	ProblemType  string   `json:"problem_type,omitempty" jsonschema:"Problem classification (auto-detected if omitted)"`
	Budget       float64  `json:"budget,omitempty" jsonschema:"Maximum cost in USD (default: 1.00)"`
	Tried        *tried   `json:"tried,omitempty" jsonschema:"What already failed on this same problem: the judge refuses the call unless all three are given"`
	Session      string   `json:"session,omitempty" jsonschema:"Session id for the per-session limits (default: the server's --session)"`
	RequestID    string   `json:"request_id,omitempty" jsonschema:"Your id for this call (default: a fresh one), unique in the tenant: 1-64 of A-Z a-z 0-9 _ -. Calling again with the same request_id (a retry after a timeout or a lost connection) returns the first call's answer, or waits for it while it runs, and is not paid or counted again; the retry's other arguments are ignored."`
}

type tried struct {
	LocalModel    string `json:"local_model,omitempty" jsonschema:"How the local model failed"`
	FrontierModel string `json:"frontier_model,omitempty" jsonschema:"How a single frontier model failed"`
	Tools         string `json:"tools,omitempty" jsonschema:"How the existing tools and skills failed"`
}

// server holds what the break_glass tool needs.
type server struct{ cfg Config }

const breakGlassToolDescription = `Assemble a focused multi-model panel to attack a problem that has resisted all other approaches; a judge model synthesises one structured answer (diagnosis, solution with confidence, alternatives, risks, cost, panel analysis), returned as JSON (structuredContent, and the same object as the text). Costs 3-5x a single model call. Requires the explicit 'break glass:' trigger at the start of the problem and, in 'tried', how a local model, a single frontier model and the existing tools already failed on the same problem. Calls over the approval threshold wait for a person; sessions are limited (3 calls, $5 by default), and so is each tenant over a rolling day (10 calls, $20). A call may take minutes: it sends progress notifications when given a progressToken. Give a request_id to retry a call safely.`

// New returns an MCP server with the break_glass tool, and the job tools
// when cfg has Jobs. Every input schema is plain (no null
// unions); every output schema is the wire type's generated schema.
func New(cfg Config) (*sdk.Server, error) {
	s := &server{cfg}
	in, err := inputSchema[breakGlassArgs]()
	if err != nil {
		return nil, err
	}
	types := make([]any, 0, 5)
	for _, t := range schemas.ProblemTypes() {
		types = append(types, t)
	}
	in.Properties["problem_type"].Enum = types
	out, err := outputSchema(schemas.KindBreakGlassResponse)
	if err != nil {
		return nil, err
	}
	// The same rule as the wire's request_id.
	in.Properties["request_id"].Pattern = schemaPattern(out, "request_id")
	srv := sdk.NewServer(&sdk.Implementation{Name: "makerfleet-break-glass", Version: cfg.Version}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "break_glass", Description: breakGlassToolDescription, InputSchema: in, OutputSchema: out}, s.breakGlass)
	if cfg.Jobs != nil {
		if err := addJobTools(srv, cfg.Jobs); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// breakGlass is the tool handler. Input problems are tool errors (IsError)
// with the reason in plain text, which the calling model can read; the
// judge's response, refusals included, is the result's structured content
// and, the same JSON, its text (IsError for refused, denied and failed);
// only a failure of the server itself is a protocol error.
func (s *server) breakGlass(ctx context.Context, creq *sdk.CallToolRequest, args breakGlassArgs) (*sdk.CallToolResult, any, error) {
	session := args.Session
	if session == "" {
		session = s.cfg.Session
	}
	in := breakglass.Input{
		Problem: args.Problem, ProblemType: args.ProblemType, Files: args.ContextFiles, BudgetUSD: args.Budget,
		Session: session, Tenant: s.cfg.Tenant, Requester: s.cfg.Requester, Root: s.cfg.Root, ID: args.RequestID,
		Parent: s.cfg.Parent,
		Tried:  map[string]string{},
	}
	if t := args.Tried; t != nil {
		in.Tried[schemas.AttemptLocalModel] = t.LocalModel
		in.Tried[schemas.AttemptFrontierModel] = t.FrontierModel
		in.Tried[schemas.AttemptTools] = t.Tools
	}
	req, _, err := breakglass.Build(in)
	if err != nil {
		return toolError("invalid request: " + err.Error()), nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	prog := startProgress(ctx, creq, s.cfg.ProgressEvery, "break glass "+req.RequestID+": asking the judges' panel")
	defer prog.Stop()
	resp, err := s.cfg.Judges.Ask(ctx, req, func(r *schemas.BreakGlassResponse) {
		prog.Set(fmt.Sprintf("break glass %s: %s; waiting for a person (maker judge approve %s)", r.RequestID, r.Reason, r.RequestID))
	})
	if resp == nil {
		return toolError("break glass failed: " + err.Error()), nil, nil
	}
	if args.RequestID != "" && resp.Session != session {
		return toolError(fmt.Sprintf("invalid request: request_id %q was used by another session of this tenant; choose another", args.RequestID)), nil, nil
	}
	body, merr := json.Marshal(resp)
	if merr != nil {
		return nil, nil, merr
	}
	// The SDK validates body against the output schema and sends it as
	// structuredContent and as the text.
	return &sdk.CallToolResult{IsError: err != nil}, json.RawMessage(body), nil
}

func toolError(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
}
