package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestVoterChecksModel: a voter whose model server does not answer exits 1
// at once, naming the URL and the error; one whose server does not list
// its model says so clearly and runs on.
func TestVoterChecksModel(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)

	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		port, err := testkit.FreePort() // nothing listens there
		if err != nil {
			t.Fatal(err)
		}
		url := "http://127.0.0.1:" + strconv.Itoa(port) + "/v1"
		// Well inside the bound: a voter that starts anyway runs until
		// this ends, and exits interrupted.
		ctx, cancel := context.WithTimeout(context.Background(), 2*modelCheckTimeout)
		defer cancel()
		var out, errb syncBuffer
		start := time.Now()
		code := Main(ctx, []string{"voter", "--nats", srv.URL, "--llm-base-url", url, "--model", "m"}, &out, &errb)
		if code != ExitError || !strings.HasPrefix(errb.String(), "maker: model server "+url+": GET /models: ") ||
			!strings.Contains(errb.String(), "connection refused") {
			t.Errorf("exit %d, stderr %q; want exit %d naming %s and the connection refused", code, errb.String(), ExitError, url)
		}
		if took := time.Since(start); took > modelCheckTimeout {
			t.Errorf("the voter took %s to give up, want under %s", took, modelCheckTimeout)
		}
	})

	t.Run("model not listed", func(t *testing.T) {
		t.Parallel()
		sim, err := simllm.Start(t.Context(), "127.0.0.1:0", simllm.Config{}) // lists sim-1
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = sim.Close(ctx)
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- Main(ctx, []string{"voter", "--nats", srv.URL, "--llm-base-url", sim.URL(), "--model", "other-model"}, &out, &errb)
		}()
		// Running: pulling sample requests.
		_, js := testkit.Connect(t, srv.URL)
		pulling := func() bool {
			c, err := js.Consumer(t.Context(), bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
			if err != nil {
				return false
			}
			info, err := c.Info(t.Context())
			return err == nil && info.NumWaiting > 0
		}
		for deadline := time.Now().Add(30 * time.Second); !pulling(); {
			if time.Now().After(deadline) {
				t.Fatalf("the voter is not pulling after 30s: %s", errb.String())
			}
			select {
			case code := <-done:
				t.Fatalf("the voter exited %d: %s", code, errb.String())
			case <-time.After(10 * time.Millisecond): // poll interval
			}
		}
		cancel()
		if code := <-done; code != ExitOK {
			t.Errorf("the voter exited %d when stopped, want 0: %s", code, errb.String())
		}
		log := errb.String()
		for _, want := range []string{"level=WARN", "does not list the model", `model=other-model`, sim.URL(), `lists sim-1; not \"other-model\"`} {
			if !strings.Contains(log, want) {
				t.Errorf("stderr lacks %q:\n%s", want, log)
			}
		}
	})
}
