package providers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/providers"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, topo := testkit.StartTopology(t)
	kv := topo.Providers

	mirror := providers.NewMirror(kv)
	mctx, stop := context.WithCancel(ctx)
	defer func() { stop(); mirror.Wait() }()
	if err := mirror.Start(mctx); err != nil {
		t.Fatal(err)
	}
	src := providers.MirrorSource(mirror)

	d := schemas.Deployment{Name: "openai-east", BaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY",
		Model: "gpt-4.1-mini", InputUSDPerMTok: 0.4, CachedInputUSDPerMTok: 0.1, OutputUSDPerMTok: 1.6, RPM: 500, TPM: 200_000}
	saved, err := providers.Set(ctx, kv, d)
	if err != nil {
		t.Fatal(err)
	}
	if saved.UpdatedAt.IsZero() || saved.Kind != schemas.KindDeployment {
		t.Errorf("saved %+v without its header or time", saved)
	}
	got, err := providers.Get(ctx, kv, "openai-east")
	if err != nil || got.RPM != 500 || got.APIKeyEnv != "OPENAI_API_KEY" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	d2 := d
	d2.Name, d2.BaseURL = "azure-west", "https://west.example.invalid/openai/v1"
	if _, err := providers.Set(ctx, kv, d2); err != nil {
		t.Fatal(err)
	}
	list, err := providers.List(ctx, kv)
	if err != nil || len(list) != 2 || list[0].Name != "azure-west" || list[1].Name != "openai-east" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { ds, _ := src(); return len(ds) == 2 }, "the mirror never saw both deployments")

	bad := d
	bad.APIKeyEnv = "MAKER_NATS_PASSWORD"
	if _, err := providers.Set(ctx, kv, bad); !errors.Is(err, providers.ErrInvalid) {
		t.Errorf("a deployment naming a fleet secret as its key: %v, want ErrInvalid", err)
	}
	// A record stored under another deployment's name is not that one.
	raw, _ := schemas.Encode(&saved)
	if _, err := kv.Put(ctx, "impostor", raw); err != nil {
		t.Fatal(err)
	}
	if _, err := providers.Get(ctx, kv, "impostor"); err == nil {
		t.Error("a record under another name was read as that name")
	}
	testkit.Eventually(t, 10*time.Second, func() bool { _, found, _ := mirror.Get("impostor"); return found }, "the mirror never saw the impostor")
	if ds, _ := src(); len(ds) != 2 {
		t.Errorf("the router's source took the impostor: %d deployments", len(ds))
	}

	if err := providers.Delete(ctx, kv, "azure-west"); err != nil {
		t.Fatal(err)
	}
	if err := providers.Delete(ctx, kv, "azure-west"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
	if _, err := providers.Get(ctx, kv, "../etc"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("a name that is not one: %v", err)
	}
}

func TestParseFile(t *testing.T) {
	t.Parallel()
	ok := `{"deployments":[
	  {"name":"b","base_url":"http://127.0.0.1:8080/v1","model":"sim-1","rpm":600},
	  {"name":"a","base_url":"https://api.openai.com/v1","api_key_env":"OPENAI_API_KEY","model":"gpt-4.1-mini","input_usd_per_mtok":0.4,"output_usd_per_mtok":1.6}]}`
	ds, err := providers.ParseFile([]byte(ok))
	if err != nil || len(ds) != 2 || ds[0].Name != "a" || ds[1].RPM != 600 {
		t.Fatalf("parse: %+v, %v", ds, err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"not json", `deployments`, "providers file"},
		{"unknown field", `{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m","api_key":"sk-live"}]}`, "unknown field"},
		{"key in the url", `{"deployments":[{"name":"a","base_url":"https://u:sk-1@h/v1","model":"m"}]}`, "credentials"},
		{"fleet secret as key", `{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m","api_key_env":"MAKER_REDIS_URL"}]}`, "_KEY or _TOKEN"},
		{"relative key file", `{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m","api_key_file":"../key"}]}`, "absolute"},
		{"both key refs", `{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m","api_key_env":"A_KEY","api_key_file":"/k"}]}`, "not both"},
		{"bad scheme", `{"deployments":[{"name":"a","base_url":"file:///etc/passwd","model":"m"}]}`, "http(s)"},
		{"twice", `{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m"},{"name":"a","base_url":"http://h/v1","model":"m"}]}`, "twice"},
		{"bad name", `{"deployments":[{"name":"A B","base_url":"http://h/v1","model":"m"}]}`, "name"},
		{"negative rpm", `{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m","rpm":-1}]}`, "rpm"},
		{"cached above input", `{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m","input_usd_per_mtok":1,"cached_input_usd_per_mtok":2}]}`, "cached"},
		{"trailing", `{"deployments":[]} {}`, "after"},
	} {
		_, err := providers.ParseFile([]byte(tc.file))
		if !errors.Is(err, providers.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", tc.name, err, tc.want)
		}
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(`{"deployments":[{"name":"a","base_url":"http://h/v1","model":"m","rpm":5}]}`))
	f.Add([]byte(`{"deployments":[{"name":"a","base_url":"https://h/v1","model":"m","api_key_file":"/run/k"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, err := providers.ParseFile(data)
		if err != nil {
			return
		}
		for i := range ds {
			if err := ds[i].Validate(); err != nil {
				t.Fatalf("parsed deployment does not validate: %v", err)
			}
		}
	})
}
