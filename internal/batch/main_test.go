package batch_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(natsChildEnv); dir != "" {
		serveNATS(dir) // the benchmark's nats-server: see bench_test.go
		return
	}
	goleak.VerifyTestMain(m)
}
