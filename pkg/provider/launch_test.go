package provider_test

import (
	"context"
	"errors"
	"testing"

	"github.com/skiffci/skiff/pkg/provider"
)

// TestBeginLaunch checks the launch input every backend refuses alike: a
// plan no Plan of it made, and registrations that are not one per runner.
func TestBeginLaunch(t *testing.T) {
	type plan struct {
		Token   string   `json:"token"`
		Runners []string `json:"runners"`
	}
	two := make([]provider.Registration, 2)
	for _, tc := range []struct {
		name, plan string
		regs       []provider.Registration
		code       string // "" for no error
	}{
		{"whole, one registration a runner", `{"token":"t","runners":["a","b"]}`, two, ""},
		{"replay: no registrations", `{"token":"t","runners":["a","b"]}`, nil, ""},
		{"not JSON", `fleet-1`, two, "UnreadablePlan"},
		{"another backend's plan", `{"request":{}}`, two, "UnreadablePlan"},
		{"no runners", `{"token":"t","runners":[]}`, nil, "UnreadablePlan"},
		{"fewer registrations", `{"token":"t","runners":["a","b","c"]}`, two, "Registrations"},
		{"an empty list is not a replay", `{"token":"t","runners":["a"]}`, []provider.Registration{}, "Registrations"},
	} {
		var pn plan
		err := provider.BeginLaunch(context.Background(), provider.Plan(tc.plan), &pn, "test", tc.regs, func() (bool, int) { return pn.Token != "", len(pn.Runners) })
		if tc.code == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Code != tc.code || !errors.Is(err, provider.ErrInvalid) || !provider.Permanent(err) {
			t.Errorf("%s: %v, want a final ErrInvalid coded %s", tc.name, err, tc.code)
		}
	}
}

// TestBeginLaunchEnded checks that an ended launch is a transient failure,
// whatever its plan.
func TestBeginLaunchEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := provider.BeginLaunch(ctx, `{"token":"t","runners":["a"]}`, &struct{}{}, "test", nil, func() (bool, int) { return true, 1 })
	var pe *provider.Error
	if !errors.Is(err, provider.ErrTransient) || provider.Permanent(err) || !errors.As(err, &pe) || pe.Code != "Canceled" {
		t.Errorf("BeginLaunch(ended) = %v, want a transient error coded Canceled", err)
	}
}
