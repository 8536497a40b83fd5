package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/schemas"
)

// Checks of arguments and flag values shared by several commands, worded
// for a person (schemas' own errors are worded for messages on the wire).

// jobRef reads a JOB argument: "job" (in --tenant) or "tenant/job".
// tenantSet says --tenant was given: then a tenant/job naming another
// tenant is refused rather than silently taking the job's tenant.
func jobRef(arg, tenant string, tenantSet bool) (string, string, error) {
	if strings.Count(arg, "/") > 1 {
		return "", "", usagef("invalid JOB %q: JOB is id or tenant/id", arg)
	}
	if t, j, ok := strings.Cut(arg, "/"); ok {
		if tenantSet && t != tenant {
			return "", "", usagef("JOB %q names tenant %q, but --tenant is %q: give the job id alone, or the same tenant", arg, t, tenant)
		}
		tenant, arg = t, j
	}
	if err := checkTenant(tenant); err != nil {
		return "", "", err
	}
	if err := checkJobID(arg); err != nil {
		return "", "", err
	}
	return tenant, arg, nil
}

// checkTenant and checkJobID refuse a malformed id with a message for a
// person; schemas' own errors are worded for messages on the wire.
func checkTenant(t string) error {
	if schemas.ValidTenant(t) != nil {
		return usagef("invalid tenant %q: want %s", t, schemas.TenantRule)
	}
	return nil
}

func checkJobID(id string) error {
	if schemas.ValidJobID(id) != nil {
		return usagef("invalid job id %q: want %s", id, schemas.JobIDRule)
	}
	return nil
}

// exactArgs is cobra.ExactArgs with a usage error that says what is
// expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("expected %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// checkScope checks a retention policy's --tenant and --job: a job needs
// its tenant.
func checkScope(tenant, job string) error {
	if job != "" && tenant == "" {
		return usagef("--job needs --tenant")
	}
	return checkFilter(tenant, job)
}

// checkFilter checks an optional --tenant and --job (each "": any).
func checkFilter(tenant, job string) error {
	if tenant != "" {
		if err := checkTenant(tenant); err != nil {
			return err
		}
	}
	if job != "" {
		return checkJobID(job)
	}
	return nil
}
