package cli

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"

	mcpserver "github.com/makerfleet/makerfleet/internal/app/mcp"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

func mcpCmd(e *env) *cobra.Command {
	var (
		natsURL string
		s       mcpserver.Config
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
			if err := schemas.ValidTenant(s.Tenant); err != nil {
				return usageError{err}
			}
			if _, _, err := judge.ReadFiles(s.Root, nil, 1); err != nil {
				return usagef("--root: %v", err)
			}
			if hc != nil {
				if err := refuseWithAPI(cmd, "the API key says the tenant and who asks", "tenant", "requester"); err != nil {
					return err
				}
				s.Judges, s.Jobs = apiFleet{hc}, apiFleet{hc}
			} else {
				js, closeNC, err := connectJS(natsURL, "maker-mcp", natsAuth(cmd.Context()))
				if err != nil {
					return err
				}
				defer closeNC()
				s.Judges = natsJudge{js: js, ns: bus.DefaultNamespace, identity: natsAuth(cmd.Context()).IdentityName(), notes: io.Discard}
				c, err := client.New(js.Conn(), client.WithTenant(s.Tenant), client.WithTaskSpecs(taskspec.CompileSpec))
				if err != nil {
					return usageError{err}
				}
				s.Jobs = &natsClient{c: c, nc: js.Conn()}
			}
			s.Parent, s.Version = os.Getenv(parentEnv), Version
			srv, err := mcpserver.New(s)
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
	fl.StringVar(&s.Root, "root", envOr("MAKER_JUDGE_ROOT", "."), "the only directory context files are read from [$MAKER_JUDGE_ROOT]")
	fl.StringVar(&s.Session, "session", envOr("MAKER_SESSION", "default"), "default session for the per-session limits [$MAKER_SESSION]")
	fl.StringVar(&s.Tenant, "tenant", schemas.DefaultTenant, "tenant")
	fl.StringVar(&s.Requester, "requester", "mcp-agent", "who asks, for the audit trail")
	fl.DurationVar(&s.Timeout, "timeout", 15*time.Minute, "how long one call waits for its answer")
	fl.DurationVar(&s.ProgressEvery, "progress-interval", mcpserver.DefaultProgressInterval, "how often a waiting call sends a progress notification, when the client gave a progressToken")
	return cmd
}
