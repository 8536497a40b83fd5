package schemas_test

import (
	"errors"
	"fmt"

	"github.com/makerfleet/makerfleet/schemas"
)

func ExampleDecode() {
	data := []byte(`{
		"version": 1, "kind": "job_spec", "job_id": "hanoi-10-k3", "tenant": "acme",
		"task": "hanoi", "params": {"disks": 10}, "k": 3,
		"max_samples_per_step": 100, "max_output_tokens": 750, "seed": 42,
		"temperature_first": 0, "sample_timeout_ms": 60000,
		"submitted_at": "2025-11-29T20:00:00Z"
	}`)
	var spec schemas.JobSpec
	if err := schemas.Decode(data, &spec); err != nil {
		fmt.Println(err)
		return
	}
	spec.ApplyDefaults() // the optional fields left out above
	fmt.Println(spec.Tenant, spec.JobID, spec.Task, string(spec.Params), "k", spec.K)
	fmt.Println("rest temperature", spec.Rest(), "valid fraction", spec.ValidFraction)
	// Output:
	// acme hanoi-10-k3 hanoi {"disks": 10} k 3
	// rest temperature 0.1 valid fraction 1
}

func ExampleDecode_invalid() {
	data := []byte(`{
		"version": 1, "kind": "job_spec", "job_id": "hanoi-10-k3", "tenant": "acme",
		"task": "hanoi", "params": {"disks": 10}, "k": 0,
		"max_samples_per_step": 100, "max_output_tokens": 750, "seed": 42,
		"temperature_first": 0, "sample_timeout_ms": 60000,
		"submitted_at": "2025-11-29T20:00:00Z"
	}`)
	var spec schemas.JobSpec
	err := schemas.Decode(data, &spec)
	fmt.Println(errors.Is(err, schemas.ErrInvalid))
	fmt.Println(err)

	err = schemas.Decode([]byte(`{"version": 2, "kind": "job_spec"}`), &spec)
	fmt.Println(errors.Is(err, schemas.ErrVersion))
	fmt.Println(err)
	// Output:
	// true
	// schemas: invalid message: job_spec: k is missing: give the voting margin, or submit through a path that plans it (the CLI, the HTTP API)
	// true
	// schemas: unsupported version: 2 (this build reads version 1)
}

func ExampleAll() {
	for _, mt := range schemas.All() {
		fmt.Println(mt.Kind, schemas.SchemaID(mt.Kind))
	}
	// Output:
	// job_spec https://makerfleet.dev/schemas/v1/job_spec.schema.json
	// sample_request https://makerfleet.dev/schemas/v1/sample_request.schema.json
	// sample_result https://makerfleet.dev/schemas/v1/sample_result.schema.json
	// step_decided https://makerfleet.dev/schemas/v1/step_decided.schema.json
	// job_status https://makerfleet.dev/schemas/v1/job_status.schema.json
	// job_report https://makerfleet.dev/schemas/v1/job_report.schema.json
	// job_record https://makerfleet.dev/schemas/v1/job_record.schema.json
	// lease https://makerfleet.dev/schemas/v1/lease.schema.json
	// journal_entry https://makerfleet.dev/schemas/v1/journal_entry.schema.json
	// checkpoint https://makerfleet.dev/schemas/v1/checkpoint.schema.json
	// dead_letter https://makerfleet.dev/schemas/v1/dead_letter.schema.json
	// break_glass_request https://makerfleet.dev/schemas/v1/break_glass_request.schema.json
	// break_glass_response https://makerfleet.dev/schemas/v1/break_glass_response.schema.json
	// break_glass_audit https://makerfleet.dev/schemas/v1/break_glass_audit.schema.json
	// break_glass_approval https://makerfleet.dev/schemas/v1/break_glass_approval.schema.json
	// approval_decision https://makerfleet.dev/schemas/v1/approval_decision.schema.json
	// arbitration_request https://makerfleet.dev/schemas/v1/arbitration_request.schema.json
	// arbitration_response https://makerfleet.dev/schemas/v1/arbitration_response.schema.json
	// arbiter_decision https://makerfleet.dev/schemas/v1/arbiter_decision.schema.json
	// task_record https://makerfleet.dev/schemas/v1/task_record.schema.json
	// control_request https://makerfleet.dev/schemas/v1/control_request.schema.json
	// decide_request https://makerfleet.dev/schemas/v1/decide_request.schema.json
	// control_reply https://makerfleet.dev/schemas/v1/control_reply.schema.json
	// tenant_quota https://makerfleet.dev/schemas/v1/tenant_quota.schema.json
	// batch_record https://makerfleet.dev/schemas/v1/batch_record.schema.json
	// batch_item https://makerfleet.dev/schemas/v1/batch_item.schema.json
	// api_key https://makerfleet.dev/schemas/v1/api_key.schema.json
	// retention_policy https://makerfleet.dev/schemas/v1/retention_policy.schema.json
	// calibration https://makerfleet.dev/schemas/v1/calibration.schema.json
	// model_price https://makerfleet.dev/schemas/v1/model_price.schema.json
	// deployment https://makerfleet.dev/schemas/v1/deployment.schema.json
	// voter_presence https://makerfleet.dev/schemas/v1/voter_presence.schema.json
	// coordinator_presence https://makerfleet.dev/schemas/v1/coordinator_presence.schema.json
	// webhook_task https://makerfleet.dev/schemas/v1/webhook_task.schema.json
	// webhook_delivery https://makerfleet.dev/schemas/v1/webhook_delivery.schema.json
}
