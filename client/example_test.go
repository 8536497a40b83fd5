package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
)

// Submit a job, wait for it with its progress, and read its report.
func Example() {
	ctx := context.Background()
	natsURL, stop := startFleet(ctx) // a whole fleet in this process, for the example
	defer stop()

	c, err := client.Dial(ctx, natsURL, client.WithTenant("acme"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	sub, err := c.Submit(ctx, schemas.JobSpec{
		Task: "hanoi", Params: json.RawMessage(`{"disks": 4}`), K: 2, Seed: 7,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var last int64
	rep, err := c.Wait(ctx, sub.JobID, func(st schemas.JobStatus) { last = st.Steps })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sub.Tenant, rep.State, rep.Steps, "steps", last <= rep.Steps)
	// Output: acme solved 15 steps true
}

// Run a batch: one job per JSONL line, results in input order.
func ExampleClient_SubmitBatch() {
	ctx := context.Background()
	natsURL, stop := startFleet(ctx)
	defer stop()
	c, err := client.Dial(ctx, natsURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	input := `{"custom_id": "small", "task": "hanoi", "params": {"disks": 2}, "k": 1}
{"custom_id": "broken", "task": "hanoi", "params": {"disks": "two"}, "k": 1}
{"custom_id": "large", "task": "hanoi", "params": {"disks": 5}, "k": 1}
`
	b, err := c.SubmitBatch(ctx, strings.NewReader(input), client.BatchOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	done, err := c.WaitBatch(ctx, b.ID, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d lines, %d completed, %d failed\n", done.State, done.Counts.Total, done.Counts.Completed, done.Counts.Failed)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(c.BatchOutput(ctx, b.ID, pw)) }()
	dec := json.NewDecoder(pr)
	for {
		var l schemas.BatchOutputLine
		if err := dec.Decode(&l); err != nil {
			break
		}
		if l.Error != nil {
			fmt.Println(l.Line, l.CustomID, "error:", l.Error.Code)
			continue
		}
		fmt.Println(l.Line, l.CustomID, l.Response.State, l.Response.Steps)
	}
	// Output:
	// completed: 3 lines, 2 completed, 1 failed
	// 1 small solved 3
	// 2 broken error: invalid_params
	// 3 large solved 31
}

// startFleet starts a fleet in this process (nats-server, an embedded
// Redis, a coordinator and a voter on the simulated model) and returns
// its NATS URL and how to stop it.
func startFleet(ctx context.Context) (string, func()) {
	f, err := fleet.Start(ctx, fleet.Options{
		Sim: simllm.Config{Accuracy: 1}, Coordinators: 1, Voters: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return f.NATSURL, f.Close
}
