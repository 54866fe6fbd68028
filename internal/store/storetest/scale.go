package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/store"
)

// testEnvScale: a new env has the zero scale (its defaults: one fixed
// replica); SetEnvScale stores a fixed count or a range, and zeros back;
// PutEnv keeps the scale; an invalid scale or an unknown env is refused
// and changes nothing.
func testEnvScale(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://a-prod:8080", CreatedAt: t0}))
	must(t, s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "dev", WorkerURL: "http://a-dev:8080", CreatedAt: t0}))
	scale := func(env string) store.EnvScale {
		t.Helper()
		e, err := s.GetEnv(ctx, "acme", env)
		must(t, err)
		return e.Scale
	}
	if got := scale("prod"); got != (store.EnvScale{}) {
		t.Errorf("a new env's scale = %+v, want zero", got)
	}
	if got, want := scale("prod").Resolved(), (store.EnvScale{MinReplicas: 1, MaxReplicas: 1, TurnsPerReplica: store.DefaultTurnsPerReplica}); got != want {
		t.Errorf("a new env's resolved scale = %+v, want %+v", got, want)
	}

	steps := []store.EnvScale{
		{MinReplicas: 3, MaxReplicas: 3},
		{MinReplicas: 2, MaxReplicas: 5, TurnsPerReplica: 4},
		{MinReplicas: 1, MaxReplicas: store.MaxEnvReplicas, TurnsPerReplica: store.MaxTurnsPerReplica},
		{},
		{MinReplicas: 2, MaxReplicas: 7},
	}
	for _, sc := range steps {
		must(t, s.SetEnvScale(ctx, "acme", "prod", sc))
		if got := scale("prod"); got != sc {
			t.Errorf("after SetEnvScale(%+v): %+v", sc, got)
		}
	}
	want := store.EnvScale{MinReplicas: 2, MaxReplicas: 7}
	if got := scale("dev"); got != (store.EnvScale{}) {
		t.Errorf("another env's scale changed: %+v", got)
	}

	// Recording a new worker URL, or reviving a retired env, keeps it.
	must(t, s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://a-prod-2:8080", CreatedAt: at(time.Hour)}))
	must(t, s.RetireEnv(ctx, "acme", "prod", at(2*time.Hour)))
	must(t, s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://a-prod-2:8080", CreatedAt: at(3 * time.Hour)}))
	if got := scale("prod"); got != want {
		t.Errorf("scale after PutEnv = %+v, want %+v", got, want)
	}
	envs, err := s.ListEnvs(ctx)
	must(t, err)
	gotList := map[string]store.EnvScale{}
	for _, e := range envs {
		gotList[e.Name] = e.Scale
	}
	if diff := cmp.Diff(map[string]store.EnvScale{"dev": {}, "prod": want}, gotList); diff != "" {
		t.Errorf("ListEnvs scales (-want +got):\n%s", diff)
	}

	bad := map[string]store.EnvScale{
		"min above max":       {MinReplicas: 4, MaxReplicas: 3},
		"min above max 1":     {MinReplicas: 2, MaxReplicas: 1},
		"above the cap":       {MinReplicas: 1, MaxReplicas: store.MaxEnvReplicas + 1},
		"fixed above cap":     {MinReplicas: store.MaxEnvReplicas + 1},
		"negative min":        {MinReplicas: -1, MaxReplicas: 2},
		"negative max":        {MaxReplicas: -1},
		"negative turns":      {MinReplicas: 1, MaxReplicas: 2, TurnsPerReplica: -8},
		"turns above the cap": {MinReplicas: 1, MaxReplicas: 2, TurnsPerReplica: store.MaxTurnsPerReplica + 1},
	}
	for name, sc := range bad {
		wantErr(t, "SetEnvScale "+name, s.SetEnvScale(ctx, "acme", "prod", sc), store.ErrInvalidScale)
	}
	if got := scale("prod"); got != want {
		t.Errorf("scale after refused SetEnvScales = %+v, want %+v", got, want)
	}
	wantErr(t, "SetEnvScale of an unknown env", s.SetEnvScale(ctx, "acme", "nope", store.EnvScale{MinReplicas: 2}), store.ErrNotFound)
}
