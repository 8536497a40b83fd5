package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

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

// mcpServer holds what the break_glass tool needs.
type mcpServer struct {
	// judges are asked for break glass: on the bus (natsJudge) or through
	// the API (apiFleet).
	judges                           judgePort
	root, session, tenant, requester string
	timeout                          time.Duration
	// progressEvery is how often a waiting call sends a progress
	// notification when the client asked for them; 0 is
	// defaultProgressInterval.
	progressEvery time.Duration
	// jobs, when set, adds the job tools (mcp_jobs.go), acting in its own
	// tenant (--tenant on NATS, the API key's through the API).
	jobs jobsPort
}

const breakGlassToolDescription = `Assemble a focused multi-model panel to attack a problem that has resisted all other approaches; a judge model synthesises one structured answer (diagnosis, solution with confidence, alternatives, risks, cost, panel analysis), returned as JSON (structuredContent, and the same object as the text). Costs 3-5x a single model call. Requires the explicit 'break glass:' trigger at the start of the problem and, in 'tried', how a local model, a single frontier model and the existing tools already failed on the same problem. Calls over the approval threshold wait for a person; sessions are limited (3 calls, $5 by default), and so is each tenant over a rolling day (10 calls, $20). A call may take minutes: it sends progress notifications when given a progressToken. Give a request_id to retry a call safely.`

// newMCPServer returns an MCP server with the break_glass tool, and the
// job tools when s has a job client. Every input schema is plain (no null
// unions); every output schema is the wire type's generated schema.
func newMCPServer(s *mcpServer) (*mcp.Server, error) {
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
	srv := mcp.NewServer(&mcp.Implementation{Name: "makerfleet-break-glass", Version: Version}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "break_glass", Description: breakGlassToolDescription, InputSchema: in, OutputSchema: out}, s.breakGlass)
	if s.jobs != nil {
		if err := addJobTools(srv, s.jobs); err != nil {
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
func (s *mcpServer) breakGlass(ctx context.Context, creq *mcp.CallToolRequest, args breakGlassArgs) (*mcp.CallToolResult, any, error) {
	session := firstOf(args.Session, s.session)
	in := bgInput{
		Problem: args.Problem, ProblemType: args.ProblemType, Files: args.ContextFiles, BudgetUSD: args.Budget,
		Session: session, Tenant: s.tenant, Requester: s.requester, Root: s.root, ID: args.RequestID,
		Tried: map[string]string{},
	}
	if t := args.Tried; t != nil {
		in.Tried[schemas.AttemptLocalModel] = t.LocalModel
		in.Tried[schemas.AttemptFrontierModel] = t.FrontierModel
		in.Tried[schemas.AttemptTools] = t.Tools
	}
	req, _, err := buildRequest(in)
	if err != nil {
		return toolError("invalid request: " + err.Error()), nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	prog := startProgress(ctx, creq, s.progressEvery, "break glass "+req.RequestID+": asking the judges' panel")
	defer prog.Stop()
	resp, err := s.judges.Ask(ctx, req, func(r *schemas.BreakGlassResponse) {
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
	return &mcp.CallToolResult{IsError: err != nil}, json.RawMessage(body), nil
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func mcpCmd(e *env) *cobra.Command {
	var (
		natsURL string
		s       mcpServer
		api     *apiFlags
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the break_glass and job tools over MCP on stdio (for agents), backed by the fleet",
		Long: `mcp serves MCP tools over stdin/stdout. break_glass: each call becomes a break-glass
request to the judges, with the same rules as maker breakglass: context files are read
only from --root, credential-like files are withheld (and listed in the answer's
excluded_files). submit_job, job_status and job_result submit a job to the fleet in --tenant,
follow it and read its report, as maker submit, status and result do.

Every tool has a plain input schema (no null unions) and an output schema: a result's
structuredContent is the fleet's message (break_glass_response, job_status, job_report in
schemas/jsonschema) and its text is the same object as JSON. Input errors are tool errors in
plain text. A call that waits (a break_glass panel, a person's approval) sends
notifications/progress every --progress-interval when the client gave a progressToken, so
a client that resets its timeout on progress keeps waiting (up to --timeout). A break_glass
request_id makes a retry safe: the same id in the tenant returns the first call's answer, or
joins it while it runs, and is not paid again.

Register it with an MCP client, e.g. in .mcp.json:
  {"mcpServers": {"break-glass": {"command": "maker", "args": ["mcp", "--nats", "nats://127.0.0.1:4222"]}}}
` + apiHelp + `
Over the API every tool acts as the API key's tenant and holder (--tenant and --requester
are refused): {"command": "maker", "args": ["mcp"], "env": {"MAKER_API_URL": "...",
"MAKER_API_KEY": "..."}}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hc, err := api.client(cmd)
			if err != nil {
				return err
			}
			if err := schemas.ValidTenant(s.tenant); err != nil {
				return usageError{err}
			}
			if _, _, err := judge.ReadFiles(s.root, nil, 1); err != nil {
				return usagef("--root: %v", err)
			}
			if hc != nil {
				if err := refuseWithAPI(cmd, "the API key says the tenant and who asks", "tenant", "requester"); err != nil {
					return err
				}
				s.judges, s.jobs = apiFleet{hc}, apiFleet{hc}
			} else {
				js, closeNC, err := connectJS(natsURL, "maker-mcp", natsAuth(cmd.Context()))
				if err != nil {
					return err
				}
				defer closeNC()
				s.judges = natsJudge{js: js, ns: bus.DefaultNamespace, identity: natsAuth(cmd.Context()).IdentityName(), notes: io.Discard}
				c, err := client.New(js.Conn(), client.WithTenant(s.tenant))
				if err != nil {
					return usageError{err}
				}
				s.jobs = &natsClient{c: c, nc: js.Conn()}
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
	api = addAPIFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&s.root, "root", envOr("MAKER_JUDGE_ROOT", "."), "the only directory context files are read from [$MAKER_JUDGE_ROOT]")
	fl.StringVar(&s.session, "session", envOr("MAKER_SESSION", "default"), "default session for the per-session limits [$MAKER_SESSION]")
	fl.StringVar(&s.tenant, "tenant", schemas.DefaultTenant, "tenant")
	fl.StringVar(&s.requester, "requester", "mcp-agent", "who asks, for the audit trail")
	fl.DurationVar(&s.timeout, "timeout", 15*time.Minute, "how long one call waits for its answer")
	fl.DurationVar(&s.progressEvery, "progress-interval", defaultProgressInterval, "how often a waiting call sends a progress notification, when the client gave a progressToken")
	return cmd
}
