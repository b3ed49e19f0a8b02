package local

// The providers of skiff local: one per backend its pools name, routed by
// pool when there are several, and the metrics-record writer each
// backend's records are measured with.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/writer"
	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/provider/dryrun"
	"github.com/skiffci/skiff/pkg/provider/process"
	"github.com/skiffci/skiff/pkg/provider/route"
	"github.com/skiffci/skiff/pkg/provider/slurm"
	"github.com/skiffci/skiff/pkg/store/sqlitestore"
	"github.com/skiffci/skiff/pkg/telemetry"
)

// ProviderOf is the provider that runs pool p's runners in local mode:
// the backend its section names (process, slurm, kubernetes, container),
// else def (skiff local's --provider) for a pool with none or with an ec2:
// section. Under dry-run every pool is dry-run.
func ProviderOf(p *pool.Pool, def string) string {
	if def == "dry-run" || p.Backend == pool.BackendEC2 || p.Backend == "" {
		return def
	}
	return string(p.Backend)
}

// Routed returns the pools ProviderOf sends to name, as a config of their
// own (the same *pool.Pool values).
func Routed(pools *pool.Config, def, name string) *pool.Config {
	out := &pool.Config{}
	for _, p := range pools.Pools {
		if ProviderOf(p, def) == name {
			out.Pools = append(out.Pools, p)
		}
	}
	return out
}

// ProvidersOf lists the providers the pools need, sorted.
func ProvidersOf(pools *pool.Config, def string) []string {
	var out []string
	for _, p := range pools.Pools {
		if n := ProviderOf(p, def); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// buildProvider builds the provider of every backend the pools use into
// l.Provider: that provider itself when there is one, else a router
// that sends each pool's calls to its own.
func (l *Local) buildProvider(pools *pool.Config) error {
	names := ProvidersOf(pools, l.cfg.Provider)
	if len(names) == 0 {
		names = []string{l.cfg.Provider}
	}
	var members []provider.Provider
	fail := func(err error) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, m := range members {
			if c, ok := m.(closer); ok {
				_ = c.Close(ctx) // a process provider may have adopted runners: they are ended
			}
		}
		return err
	}
	for _, name := range names {
		p, err := l.buildMember(name, Routed(pools, l.cfg.Provider, name))
		if err != nil {
			return fail(err)
		}
		members = append(members, p)
	}
	if len(members) == 1 {
		l.Provider = members[0]
		if c, ok := members[0].(closer); ok {
			l.closeFn = c.Close
		}
		return nil
	}
	byPool := map[string]string{}
	for _, p := range pools.Pools {
		byPool[p.Name] = ProviderOf(p, l.cfg.Provider)
	}
	def := l.cfg.Provider
	if !slices.Contains(names, def) {
		def = names[0]
	}
	r, err := route.New(members, byPool, def)
	if err != nil {
		return fail(err)
	}
	l.Provider, l.closeFn = r, r.Close
	return nil
}

// closer is a provider with something to end when the daemon stops (the
// process provider's runners); the router closes its members that are.
type closer interface {
	Close(ctx context.Context) error
}

// buildMember builds the provider name for its pools (routed to it).
func (l *Local) buildMember(name string, pools *pool.Config) (provider.Provider, error) {
	cfg := l.cfg
	switch name {
	case "process":
		if len(cfg.RunnerCommand) == 0 {
			return nil, fmt.Errorf("local mode: pools %v run on the process provider, which needs the runner command", poolNames(pools))
		}
		p, err := process.New(process.Options{Command: cfg.RunnerCommand, DataDir: filepath.Join(cfg.DataDir, "runners"),
			Env: cfg.RunnerEnv, Limits: cfg.Limits, LogDir: filepath.Join(cfg.DataDir, "logs"), Logger: l.log, Now: cfg.Now,
			Hide: append([]string{cfg.DataDir}, cfg.Hide...)})
		if err != nil {
			return nil, err
		}
		if err := needSandbox(pools, p.SandboxError()); err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = p.Close(ctx) // it may have adopted runners: they are ended
			return nil, err
		}
		// Scale-up reserves a runner in the ledger (the pool's maxRunners)
		// before it registers one with GitHub; a maxRunners above what this
		// machine runs would register JIT runners the provider then refuses.
		for _, pl := range pools.Pools {
			pl.MaxRunners = min(pl.MaxRunners, p.Limit(pl.Name))
		}
		return p, nil
	case "slurm":
		if cfg.SlurmShared == "" {
			return nil, fmt.Errorf("local mode: pools %v run on the slurm provider, which needs a shared directory (SlurmShared)", poolNames(pools))
		}
		// skiff's record of its jobs lives in its own data directory, out
		// of the jobs' reach; registrations and work on the shared one. The
		// job names start with the deployment id.
		p, err := slurm.New(slurm.Options{Commander: slurm.Exec{Env: cfg.SlurmEnv}, Command: cfg.RunnerCommand, Env: cfg.RunnerEnv,
			JITDir: filepath.Join(cfg.SlurmShared, "jit"), WorkDir: filepath.Join(cfg.SlurmShared, "work"),
			StateDir: filepath.Join(cfg.DataDir, "slurm"), Sudo: cfg.SlurmSudo,
			NamePrefix: SlurmNamePrefix(cfg.Deployment), Logger: l.log, Now: cfg.Now})
		if err != nil {
			return nil, err
		}
		// One live runner per run-as account: a maxRunners above a pool's
		// accounts would register JIT runners that wait for an account.
		for _, pl := range pools.Pools {
			if pl.Slurm != nil && !pl.Slurm.RunAsShared && len(pl.Slurm.RunAs) > 0 {
				pl.MaxRunners = min(pl.MaxRunners, len(pl.Slurm.RunAs))
			}
		}
		return p, nil
	case "dry-run":
		return dryrun.New(l.log, cfg.Now), nil
	}
	for _, p := range append([]provider.Provider{cfg.ExternalProvider}, cfg.ExternalProviders...) {
		if p != nil && p.Name() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("local mode: pools %v run on provider %q, which is none of process, slurm, dry-run, and no such provider was built",
		poolNames(pools), name)
}

func poolNames(pools *pool.Config) []string {
	out := make([]string, 0, len(pools.Pools))
	for _, p := range pools.Pools {
		out = append(out, p.Name)
	}
	return out
}

// needSandbox refuses to start when a pool's runners need a sandbox
// (every pool but a process pool with sandbox: none) and the machine
// cannot give one (why).
func needSandbox(pools *pool.Config, why error) error {
	if why == nil {
		return nil
	}
	var need []string
	for _, pl := range pools.Pools {
		if !pl.Process.Unsandboxed() {
			need = append(need, pl.Name)
		}
	}
	if len(need) == 0 {
		return nil
	}
	return fmt.Errorf("local mode: the runners of pools %v need a sandbox, which this machine cannot give (%w): "+
		"install bubblewrap, or opt a process pool out with process: {sandbox: none} (skiff validate says what that allows)", need, why)
}

// metricsWriter is the reconciler's metrics writer and the pools whose
// ended runners get a record: with MetricsRecords, one record per finished
// job in the SQLite file (l.MetricsRecords), measured the provider's way.
func (l *Local) metricsWriter(pools *pool.Config, ledger *sqlitestore.Ledger, counter telemetry.Counter) (writer.MetricsWriter, []string) {
	if !l.cfg.MetricsRecords {
		return writer.NoMetrics{}, nil
	}
	l.MetricsRecords = sqlitestore.NewMetricsRecords(l.db)
	recordPools := []string{"*"}
	r, ok := l.Provider.(*route.Router)
	if !ok {
		return l.recordWriter(l.Provider, pools, recordPools, ledger, counter), recordPools
	}
	// One daemon, several backends: each pool's records are measured its
	// provider's way.
	byPool := writer.PoolWriters{}
	for _, p := range r.Members() {
		routed := Routed(pools, l.cfg.Provider, p.Name())
		w := l.recordWriter(p, pools, poolNames(routed), ledger, counter)
		for _, pl := range routed.Pools {
			byPool[pl.Name] = w
		}
	}
	return byPool, recordPools
}

// recordWriter is the record writer of the pools (names) that run on p:
// what each record says of where its job ran and what it used comes from
// p's backend.
func (l *Local) recordWriter(p provider.Provider, pools *pool.Config, names []string, ledger *sqlitestore.Ledger,
	counter telemetry.Counter) *writer.RecordWriter {
	rw := &writer.RecordWriter{Pools: names, Jobs: l.Store, Ledger: ledger, Out: l.MetricsRecords,
		CloudProvider: p.Name(), Region: "local", Counter: counter, Logger: l.log, CostPerHour: map[string]float64{}}
	for _, pl := range pools.Pools { // an operator's rate for pools off EC2
		if pl.CostPerHour > 0 {
			rw.CostPerHour[pl.Name] = pl.CostPerHour
		}
	}
	switch p := p.(type) {
	case *process.Provider:
		// The provider measures each runner and describes this machine.
		rw.CloudProvider, rw.Peaks, rw.Host = "local", writer.ProviderPeaks{Source: p}, process.RecordHost(p.Host())
	case *slurm.Provider:
		// The cluster's accounting (sacct) says what each job used and
		// where it ran; the zone is the cluster, there is no region.
		rw.CloudProvider, rw.Peaks, rw.Region = "slurm", writer.AccountedPeaks{Source: p}, ""
	default:
		if src, ok := p.(writer.UsageSource); ok {
			// A provider that measures its runners itself (kubernetes: the
			// runner container's termination message).
			rw.Peaks = writer.ProviderPeaks{Source: src}
		}
		if h, ok := p.(interface{ RecordHost() *metrics.Host }); ok {
			// A provider that runs on this machine describes it (container).
			rw.Host = h.RecordHost()
		}
	}
	return rw
}
