package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/skiffci/skiff/pkg/allow"
	"github.com/skiffci/skiff/pkg/github"
	"github.com/skiffci/skiff/pkg/github/scaleset"
	"github.com/skiffci/skiff/pkg/listener"
	"github.com/skiffci/skiff/pkg/pool"
)

// ListenerStateFile is the listener's state in the data directory: each
// scale set's session, last message and statistics (skiff status reads
// it), and the session a crash left.
func ListenerStateFile(dataDir string) string { return filepath.Join(dataDir, "listener.json") }

// listenerPools are the pools that take their jobs from a scale set.
func listenerPools(pools *pool.Config) []*pool.Pool {
	var out []*pool.Pool
	for _, p := range pools.Pools {
		if listener.Uses(p) {
			out = append(out, p)
		}
	}
	return out
}

// needsWebhook reports whether a pool takes its jobs from the webhook:
// with none, skiff local opens no port.
func needsWebhook(pools *pool.Config) bool { return len(listenerPools(pools)) < len(pools.Pools) }

// NeedsWebhook reports whether pools has a pool that takes its jobs from
// the webhook (true for nil, a pools file that could not be loaded:
// loading it again says why).
func NeedsWebhook(pools *pool.Config) bool { return pools == nil || needsWebhook(pools) }

// listenerOrgs are the organizations the listener serves: the allow-list's
// owners (of owner and owner/name entries).
func listenerOrgs(list allow.List) ([]string, error) {
	if list.Everyone() {
		return nil, errors.New("local mode: pools with jobs: listener need the organisations named in the allow-list, not *")
	}
	return list.Owners(), nil
}

// buildListeners builds one listener per organization for the pools that
// use one, and returns scale-up's GitHub: gh, registering those pools'
// runners in their scale sets.
func (l *Local) buildListeners(pools *pool.Config, gh *github.Client, list allow.List) (scaleUpGitHub, error) {
	sg := scaleUpGitHub{Client: gh, jit: listener.JIT{Regular: gh, Listeners: map[string]*listener.Listener{}}}
	ps := listenerPools(pools)
	if len(ps) == 0 {
		return sg, nil
	}
	orgs, err := listenerOrgs(list)
	if err != nil {
		return sg, err
	}
	state, err := listener.OpenState(ListenerStateFile(l.cfg.DataDir))
	if err != nil {
		return sg, err
	}
	api, web := gitHubRoots(l.cfg.GitHubAPIURL, l.cfg.GitHubURL)
	host, _ := os.Hostname()
	for _, org := range orgs {
		c, err := scaleset.New(scaleset.Options{APIURL: api, WebURL: web, Org: org, Registrar: gh, Now: l.cfg.Now, Logger: l.log})
		if err != nil {
			return sg, err
		}
		ln, err := listener.New(listener.Options{Client: c, Allow: list, Pools: ps, Deployment: l.cfg.Deployment, Queue: l.Queue,
			Records: l.Store, Runners: l.Ledger, GitHub: gh, Groups: l.Groups, State: state,
			Owner: fmt.Sprintf("%s pid %d", host, os.Getpid()), Logger: l.log, Now: l.cfg.Now})
		if err != nil {
			return sg, err
		}
		l.Listeners = append(l.Listeners, ln)
		sg.jit.Listeners[org] = ln
	}
	return sg, nil
}

// gitHubRoots are GitHub's REST and web roots: github.com's by default;
// a web root not given is the REST root's (https://HOST for
// https://HOST/api/v3 on GHES; the simulator serves both at one root).
func gitHubRoots(api, web string) (string, string) {
	api = strings.TrimRight(api, "/")
	if api == "" {
		api = "https://api.github.com"
	}
	if web != "" {
		return api, strings.TrimRight(web, "/")
	}
	switch {
	case api == "https://api.github.com":
		return api, "https://github.com"
	case strings.HasSuffix(api, "/api/v3"):
		return api, strings.TrimSuffix(api, "/api/v3")
	}
	return api, api
}

// scaleUpGitHub is the GitHub client with the listener's registration of
// its pools' runners.
type scaleUpGitHub struct {
	*github.Client
	jit listener.JIT
}

// GenerateJITConfig implements scaleup.GitHub.
func (g scaleUpGitHub) GenerateJITConfig(ctx context.Context, inst int64, scope github.Scope, req github.JITRequest) (*github.JITConfig, error) {
	return g.jit.GenerateJITConfig(ctx, inst, scope, req)
}

// ListenerState returns each scale set's status as the listener last
// wrote it.
func (l *Local) ListenerState() ([]listener.ScaleSetStatus, error) {
	return listener.ReadState(ListenerStateFile(l.cfg.DataDir))
}
