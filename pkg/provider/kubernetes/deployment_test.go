package kubernetes_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/names"
	"github.com/skiffci/skiff/pkg/provider"
	kube "github.com/skiffci/skiff/pkg/provider/kubernetes"
)

// TestTwoDeploymentsOneNamespace: two deployments launch runners into one
// namespace; each lists (and so may end) only the Pods labelled with its
// own deployment id.
func TestTwoDeploymentsOneNamespace(t *testing.T) {
	t.Parallel()
	alpha := newEnv(t, true, func(o *kube.Options) { o.Deployment = "alpha" })
	client, _ := clientFor(t, alpha.k.c, testenv.KubeUser)
	beta, err := kube.New(kube.Options{Client: client, Namespaces: []string{alpha.ns}, Deployment: "beta",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for name, p := range map[string]provider.Provider{"alpha": alpha.p, "beta": beta} {
		res := launch(t, p, alpha.spec("cpu"), "tok-"+name, 1)
		if len(res.Runners) != 1 || res.Runners[0].Err != nil {
			t.Fatalf("launching for %s: %+v", name, res)
		}
		ids[name] = res.Runners[0].Instance.ID
	}
	for name, p := range map[string]provider.Provider{"alpha": alpha.p, "beta": beta} {
		got, err := p.List(context.Background(), provider.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != ids[name] || got[0].Tags[names.TagDeployment] != name {
			t.Errorf("deployment %s lists %+v, want its own Pod %s only, tagged with it", name, got, ids[name])
		}
	}
	if pod := alpha.pod(t, ids["alpha"]); pod.Labels[kube.LabelDeployment] != "alpha" {
		t.Errorf("Pod labels %v, want %s=alpha", pod.Labels, kube.LabelDeployment)
	}
}
