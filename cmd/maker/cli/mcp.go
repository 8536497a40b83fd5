package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/judge/judgeclient"
	"github.com/makerfleet/makerfleet/schemas"
)

// breakGlassArgs are the break_glass tool's parameters: the seed design's
// (problem, context_files, problem_type, budget) plus what the trigger
// protocol needs (tried) and the session.
type breakGlassArgs struct {
	Problem      string   `json:"problem" jsonschema:"The specific problem statement; must start with 'break glass:'"`
	ContextFiles []string `json:"context_files,omitempty" jsonschema:"Specific files to include in context, relative to the server's root; credential-like files are withheld"`
	ProblemType  string   `json:"problem_type,omitempty" jsonschema:"Problem classification (auto-detected if omitted)"`
	Budget       float64  `json:"budget,omitempty" jsonschema:"Maximum cost in USD (default: 1.00)"`
	Tried        *tried   `json:"tried,omitempty" jsonschema:"What already failed on this same problem: the judge refuses the call unless all three are given"`
	Session      string   `json:"session,omitempty" jsonschema:"Session id for the per-session limits (default: the server's --session)"`
}

type tried struct {
	LocalModel    string `json:"local_model,omitempty" jsonschema:"How the local model failed"`
	FrontierModel string `json:"frontier_model,omitempty" jsonschema:"How a single frontier model failed"`
	Tools         string `json:"tools,omitempty" jsonschema:"How the existing tools and skills failed"`
}

// mcpServer holds what the break_glass tool needs.
type mcpServer struct {
	js                               jetstream.JetStream
	ns                               bus.Namespace
	root, session, tenant, requester string
	timeout                          time.Duration
	// identity is the connection's NATS identity ("" without auth).
	identity string
	// jobs, when set, adds the job tools (mcp_jobs.go), acting in tenant.
	jobs *client.Client
}

const breakGlassToolDescription = `Assemble a focused multi-model panel to attack a problem that has resisted all other approaches; a judge model synthesises one structured answer (diagnosis, solution with confidence, alternatives, risks, cost, panel analysis). Costs 3-5x a single model call. Requires the explicit 'break glass:' trigger at the start of the problem and, in 'tried', how a local model, a single frontier model and the existing tools already failed on the same problem. Calls over the approval threshold wait for a person; sessions are limited (3 calls, $5 by default), and so is each tenant over a rolling day (10 calls, $20).`

// newMCPServer returns an MCP server with the break_glass tool, and the
// job tools when s has a job client.
func newMCPServer(s *mcpServer) (*mcp.Server, error) {
	schema, err := jsonschema.For[breakGlassArgs](nil)
	if err != nil {
		return nil, err
	}
	types := make([]any, 0, 5)
	for _, t := range schemas.ProblemTypes() {
		types = append(types, t)
	}
	schema.Properties["problem_type"].Enum = types
	srv := mcp.NewServer(&mcp.Implementation{Name: "makerfleet-break-glass", Version: Version}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "break_glass", Description: breakGlassToolDescription, InputSchema: schema}, s.breakGlass)
	if s.jobs != nil {
		if err := addJobTools(srv, s.jobs); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// breakGlass is the tool handler. Input problems and refusals are tool
// errors (IsError) with the reason, which the calling model can read; only
// a failure of the server itself is a protocol error.
func (s *mcpServer) breakGlass(ctx context.Context, _ *mcp.CallToolRequest, args breakGlassArgs) (*mcp.CallToolResult, any, error) {
	in := bgInput{
		Problem: args.Problem, ProblemType: args.ProblemType, Files: args.ContextFiles, BudgetUSD: args.Budget,
		Session: firstOf(args.Session, s.session), Tenant: s.tenant, Requester: s.requester, Root: s.root,
		Tried: map[string]string{},
	}
	if t := args.Tried; t != nil {
		in.Tried[schemas.AttemptLocalModel] = t.LocalModel
		in.Tried[schemas.AttemptFrontierModel] = t.FrontierModel
		in.Tried[schemas.AttemptTools] = t.Tools
	}
	req, warnings, err := buildRequest(in)
	if err != nil {
		return toolError("invalid request: " + err.Error()), nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := awaitJudge(ctx, s.js, s.identity, io.Discard); err != nil {
		return toolError("break glass failed: " + err.Error()), nil, nil
	}
	resp, err := judgeclient.Ask(ctx, s.js, s.ns, req)
	if resp == nil {
		return toolError("break glass failed: " + err.Error()), nil, nil
	}
	body, merr := json.MarshalIndent(resp, "", "  ")
	if merr != nil {
		return nil, nil, merr
	}
	res := &mcp.CallToolResult{}
	var text strings.Builder
	for _, w := range warnings {
		text.WriteString("note: " + w + "\n")
	}
	if err != nil {
		res.IsError = true
		fmt.Fprintf(&text, "%s: %s\n", resp.Outcome, resp.Reason)
	}
	text.Write(body)
	res.Content = []mcp.Content{&mcp.TextContent{Text: text.String()}}
	return res, nil, nil
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func mcpCmd(e *env) *cobra.Command {
	var (
		natsURL string
		s       mcpServer
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the break_glass and job tools over MCP on stdio (for agents), backed by the fleet",
		Long: `mcp serves MCP tools over stdin/stdout. break_glass: each call becomes a break-glass
request to the judges on NATS, with the same rules as maker breakglass: context files are read
only from --root, credential-like files are withheld, and the answer is returned as JSON.
submit_job, job_status and job_result submit a job to the fleet in --tenant, follow it and
read its report, as maker submit, status and result do.

Register it with an MCP client, e.g. in .mcp.json:
  {"mcpServers": {"break-glass": {"command": "maker", "args": ["mcp", "--nats", "nats://127.0.0.1:4222"]}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := schemas.ValidTenant(s.tenant); err != nil {
				return usageError{err}
			}
			if _, _, err := judge.ReadFiles(s.root, nil, 1); err != nil {
				return usagef("--root: %v", err)
			}
			js, closeNC, err := connectJS(natsURL, "maker-mcp", natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer closeNC()
			s.js, s.ns, s.identity = js, bus.DefaultNamespace, natsAuth(cmd.Context()).IdentityName()
			if s.jobs, err = client.New(js.Conn(), clientOptions(cmd.Context(), s.tenant)...); err != nil {
				return usageError{err}
			}
			srv, err := newMCPServer(&s)
			if err != nil {
				return err
			}
			e.logger(slog.LevelWarn).Info("break-glass MCP server on stdio")
			return srv.Run(cmd.Context(), &mcp.StdioTransport{})
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&s.root, "root", envOr("MAKER_JUDGE_ROOT", "."), "the only directory context files are read from [$MAKER_JUDGE_ROOT]")
	fl.StringVar(&s.session, "session", envOr("MAKER_SESSION", "default"), "default session for the per-session limits [$MAKER_SESSION]")
	fl.StringVar(&s.tenant, "tenant", schemas.DefaultTenant, "tenant")
	fl.StringVar(&s.requester, "requester", "mcp-agent", "who asks, for the audit trail")
	fl.DurationVar(&s.timeout, "timeout", 15*time.Minute, "how long one call waits for its answer")
	return cmd
}
