package testenv

import (
	"cmp"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SlurmInstall says how to install Slurm and munge at the version the tests
// were checked against (Debian 12's slurm-wlm 22.05.8).
const SlurmInstall = "apt-get install -y slurm-wlm munge"

// SlurmOptions shapes a test cluster.
type SlurmOptions struct {
	// GPUs are the node's GPUs, declared as gres gpu (default 2).
	GPUs int
	// CPUs the node declares (default 16, whatever the machine has:
	// slurmd takes the configuration's word), so that tests run many
	// one-CPU jobs at once.
	CPUs int
	// Partitions are extra partitions besides the default "debug", as
	// slurm.conf lines' values after PartitionName= (the node is added).
	Partitions []string
	// Extra are further slurm.conf lines (e.g. MaxJobCount=2).
	Extra []string
	// Accounting adds slurmdbd over a MariaDB server of the cluster's own
	// (sacct, associations enforced), with the account "ci" for root and
	// Users, and the Setup commands run through sacctmgr before the
	// controller starts (e.g. "add qos limited MaxSubmitJobsPerUser=1").
	Accounting bool
	// MinJobAge is how long squeue still shows an ended job (default 300 s).
	MinJobAge int
	Users     []string
	Setup     [][]string
}

// Slurm is a single-node Slurm cluster of a test's own: a munged, a
// slurmctld and a slurmd on 127.0.0.1 with their own key, configuration,
// ports and state directory. The daemons run as root (SlurmUser=root), so
// tests that use one must run as root.
type Slurm struct {
	// Dir holds everything of the cluster's; it is world-traversable (the
	// job's user and a second user read the configuration).
	Dir string
	// Conf is the slurm.conf path; clients find it through SLURM_CONF.
	Conf string
	// Node is the node's name (the short host name).
	Node string
	// CPUs of the node.
	CPUs int

	t      testing.TB
	mu     sync.Mutex
	ctld   *exec.Cmd
	slurmd *exec.Cmd
	munged string // the munged pid file
	dbd    *exec.Cmd
	db     *exec.Cmd
}

// Env is the environment for Slurm's clients talking to this cluster.
func (s *Slurm) Env() []string {
	return append(os.Environ(), "SLURM_CONF="+s.Conf)
}

// StartSlurm starts a cluster for t and stops it (daemons by pid, files
// removed) when t ends. Without slurmctld, slurmd or munged, or not as
// root, it skips or fails t (see Missing).
func StartSlurm(t testing.TB, o SlurmOptions) *Slurm {
	t.Helper()
	bins, ok := slurmBinaries(t)
	if !ok {
		return nil
	}
	if os.Geteuid() != 0 {
		Missing(t, "root (the test cluster's daemons run as root)", "run the Slurm tests as root")
		return nil
	}
	if o.GPUs == 0 {
		o.GPUs = 2
	}
	if o.CPUs == 0 {
		o.CPUs = 16
	}
	base, err := os.MkdirTemp("", "skiff-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	s := &Slurm{Dir: base, Conf: filepath.Join(base, "slurm.conf"), Node: host, CPUs: o.CPUs, t: t}
	t.Cleanup(func() {
		s.Stop()
		_ = os.RemoveAll(base)
	})
	makeSlurmDirs(t, base)
	sock := s.startMunged(bins[0])
	makeGPUs(t, base, o.GPUs)
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	conf := slurmConf(o, base, host, sock, s.CPUs, ports)
	if o.Accounting {
		conf = append(conf, s.startAccounting(o, host, sock)...)
	}
	conf = append(conf, o.Extra...)
	if err := os.WriteFile(s.Conf, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o.Accounting {
		s.setupAccounting(o)
	}
	s.StartController()
	s.mu.Lock()
	s.slurmd = s.daemon("slurmd")
	s.mu.Unlock()
	return s
}

// slurmBinaries finds munged, the daemons and the commands, on PATH or in
// the sbin directories; without one it skips or fails t and returns false.
func slurmBinaries(t testing.TB) ([]string, bool) {
	var bins []string
	for _, b := range []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol"} {
		p, err := exec.LookPath(b)
		if err != nil {
			for _, d := range []string{"/usr/sbin", "/sbin"} {
				if _, e := os.Stat(filepath.Join(d, b)); e == nil {
					p, err = filepath.Join(d, b), nil
				}
			}
		}
		if err != nil {
			Missing(t, b, SlurmInstall)
			return nil, false
		}
		bins = append(bins, p)
	}
	return bins, true
}

// makeSlurmDirs makes the cluster's directories under base, and munge's key.
func makeSlurmDirs(t testing.TB, base string) {
	for _, d := range []string{"munge", "run", "state", "spool", "log", "dev"} {
		mode := os.FileMode(0o755)
		if d == "munge" {
			mode = 0o700
		}
		if err := os.Mkdir(filepath.Join(base, d), mode); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(base, "munge", "key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
}

// startMunged starts the cluster's munged and returns its socket.
func (s *Slurm) startMunged(munged string) string {
	s.munged = filepath.Join(s.Dir, "run", "munged.pid")
	sock := filepath.Join(s.Dir, "run", "munge.sock")
	if out, err := exec.Command(munged, "--socket="+sock, "--key-file="+filepath.Join(s.Dir, "munge", "key"),
		"--pid-file="+s.munged, "--log-file="+filepath.Join(s.Dir, "munge", "log"),
		"--seed-file="+filepath.Join(s.Dir, "munge", "seed")).CombinedOutput(); err != nil {
		s.t.Fatalf("starting munged: %v\n%s", err, out)
	}
	return sock
}

// makeGPUs makes n GPU device files under base and the gres.conf naming
// them. Slurm 22.05 drops GPUs without device files: each GPU is a
// character device of our own (the null device's numbers), which no job
// opens.
func makeGPUs(t testing.TB, base string, n int) {
	for i := range n {
		if err := syscall.Mknod(filepath.Join(base, "dev", "gpu"+strconv.Itoa(i)), syscall.S_IFCHR|0o666, int(devNumber(1, 3))); err != nil {
			t.Fatalf("creating a GPU device file: %v", err)
		}
	}
	gres := fmt.Sprintf("Name=gpu File=%s/dev/gpu[0-%d]\n", base, n-1)
	if err := os.WriteFile(filepath.Join(base, "gres.conf"), []byte(gres), 0o644); err != nil {
		t.Fatal(err)
	}
}

// slurmConf is the cluster's slurm.conf, but accounting and o.Extra: one
// node (host) of cpus CPUs and o.GPUs GPUs in partition debug and
// o.Partitions, the controller and slurmd on ports.
func slurmConf(o SlurmOptions, base, host, sock string, cpus int, ports []int) []string {
	conf := []string{
		"ClusterName=skifftest",
		fmt.Sprintf("SlurmctldHost=%s(127.0.0.1)", host),
		"SlurmctldPort=" + strconv.Itoa(ports[0]),
		"SlurmdPort=" + strconv.Itoa(ports[1]),
		"AuthType=auth/munge",
		"CredType=cred/munge",
		"AuthInfo=socket=" + sock,
		"SlurmUser=root",
		"SlurmdUser=root",
		"StateSaveLocation=" + filepath.Join(base, "state"),
		"SlurmdSpoolDir=" + filepath.Join(base, "spool"),
		"SlurmctldPidFile=" + filepath.Join(base, "run", "slurmctld.pid"),
		"SlurmdPidFile=" + filepath.Join(base, "run", "slurmd.pid"),
		"SlurmctldLogFile=" + filepath.Join(base, "log", "slurmctld.log"),
		"SlurmdLogFile=" + filepath.Join(base, "log", "slurmd.log"),
		"ProctrackType=proctrack/linuxproc",
		"TaskPlugin=task/none",
		"SelectType=select/cons_tres",
		"SelectTypeParameters=CR_Core_Memory",
		"GresTypes=gpu",
		"MpiDefault=none",
		"ReturnToService=2",
		"SlurmdParameters=config_overrides",
		// A job that asks no memory gets this much per CPU, not the node's.
		"DefMemPerCPU=100",
		"JobAcctGatherType=jobacct_gather/linux",
		"JobAcctGatherFrequency=1",
		// Ended jobs stay in squeue this long (Slurm's default is 300 s).
		"MinJobAge=" + strconv.Itoa(cmp.Or(o.MinJobAge, 300)),
		// A cancelled job's processes get SIGKILL this long after SIGTERM:
		// Slurm's default, so that a runner's cleanup trap (its work
		// directory's removal) is not cut short on a loaded machine, as it
		// was at 5 s under a load average of 20.
		"KillWait=30",
		fmt.Sprintf("NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=8000 Gres=gpu:%d State=UNKNOWN", host, cpus, o.GPUs),
		fmt.Sprintf("PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP", host),
	}
	for _, p := range o.Partitions {
		conf = append(conf, fmt.Sprintf("PartitionName=%s Nodes=%s", p, host))
	}
	return conf
}

// devNumber is the device number of major:minor (Linux's encoding).
func devNumber(major, minor uint64) uint64 {
	return (major&0xfff)<<8 | (minor & 0xff) | (major&^0xfff)<<32 | (minor&^0xff)<<12
}

// daemon starts slurmctld or slurmd in the foreground, as the test's child.
func (s *Slurm) daemon(name string) *exec.Cmd {
	s.t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		path = filepath.Join("/usr/sbin", name)
	}
	args := []string{"-D", "-f", s.Conf}
	if name == "slurmdbd" {
		args = []string{"-D"} // it reads slurmdbd.conf next to $SLURM_CONF
	}
	cmd := exec.Command(path, args...)
	cmd.Env = s.Env()
	out, err := os.OpenFile(filepath.Join(s.Dir, "log", name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting %s: %v", name, err)
	}
	_ = out.Close()
	return cmd
}

// StartController starts slurmctld (again, after StopController) and
// waits until it answers.
func (s *Slurm) StartController() {
	s.t.Helper()
	s.mu.Lock()
	s.ctld = s.daemon("slurmctld")
	s.mu.Unlock()
	// The controller answers within a second or two of its start.
	var out []byte
	Await(s.t, "slurmctld to answer", 50*time.Millisecond, func() bool {
		var err error
		out, err = s.Command("scontrol", "ping").CombinedOutput()
		return err == nil && strings.Contains(string(out), "is UP")
	}, func() string {
		log, _ := os.ReadFile(filepath.Join(s.Dir, "log", "slurmctld.log"))
		return string(out) + "\n" + string(log)
	})
}

// StopController stops slurmctld (SIGTERM, as an administrator's restart
// does: it saves its state) and waits until it has exited.
func (s *Slurm) StopController() {
	s.mu.Lock()
	c := s.ctld
	s.ctld = nil
	s.mu.Unlock()
	stopCmd(c)
}

func stopCmd(c *exec.Cmd) {
	if c == nil || c.Process == nil {
		return
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// Stop stops the cluster: jobs still running are cancelled first, then
// slurmd, slurmctld and munged.
func (s *Slurm) Stop() {
	s.mu.Lock()
	ctld, d := s.ctld, s.slurmd
	s.ctld, s.slurmd = nil, nil
	s.mu.Unlock()
	if ctld != nil {
		_ = s.Command("scancel", "--full", "--user=root").Run()
		for _, u := range s.users() {
			_ = s.Command("scancel", "--full", "--user="+u).Run()
		}
	}
	stopCmd(d)
	stopCmd(ctld)
	s.mu.Lock()
	dbd, db := s.dbd, s.db
	s.dbd, s.db = nil, nil
	s.mu.Unlock()
	stopCmd(dbd)
	stopCmd(db)
	if b, err := os.ReadFile(s.munged); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
}

func (s *Slurm) users() []string {
	out, err := s.Command("squeue", "-h", "-o", "%u").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// Command is a Slurm client command against this cluster.
func (s *Slurm) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = s.Env()
	return cmd
}

// AsUser is a Slurm client command run as another Unix user (runuser).
func (s *Slurm) AsUser(u *user.User, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("runuser", append([]string{"-u", u.Username, "--", name}, args...)...)
	cmd.Env = s.Env()
	cmd.Dir = "/"
	return cmd
}

// RunnerInstall writes a runner install in the cluster's directory: an
// actions-runner/run.sh that execs run with its arguments, as an Actions
// runner's run.sh starts the runner. It returns the install's directory.
func (s *Slurm) RunnerInstall(t testing.TB, run string) string {
	t.Helper()
	dir := filepath.Join(s.Dir, "actions-runner")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	WriteExecutable(t, filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\nexec "+run+" \"$@\"\n"))
	return dir
}

// SecondUser returns an unprivileged Unix user for permission checks,
// creating it (no home, no login shell) the first time.
func SecondUser(t testing.TB) *user.User {
	t.Helper()
	const name = "skiff-other"
	if u, err := user.Lookup(name); err == nil {
		return u
	}
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("creating user %s: %v\n%s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// freePorts returns n ports of 127.0.0.1 the kernel picked as free. Slurm
// takes its ports from its configuration, so they are released before the
// daemons bind them; a port taken meanwhile fails the start.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// MariaDBInstall says how to install what the accounting tests need.
const MariaDBInstall = "apt-get install -y slurmdbd mariadb-server"

// installMariaDB lays out a MariaDB data directory under dir and returns it
// with the server's temporary directory, also under dir. The temporary
// directory must be the cluster's own: a MariaDB server deletes every
// "#sql*" file in its temporary directory when it starts, so with the
// default, /tmp, one cluster's server starting removed the temporary
// tables another cluster's mariadb-install-db was writing at that moment,
// and that cluster's accounting failed to start.
func installMariaDB(dir string) (data, tmp string, err error) {
	data, tmp = filepath.Join(dir, "mariadb"), filepath.Join(dir, "mariadb-tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", "", err
	}
	out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--tmpdir="+tmp, "--user=root",
		"--skip-test-db", "--auth-root-authentication-method=socket").CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	return data, tmp, nil
}

// startAccounting starts a MariaDB server and slurmdbd of the cluster's
// own and returns the slurm.conf lines that use them.
func (s *Slurm) startAccounting(o SlurmOptions, host, sock string) []string {
	t := s.t
	t.Helper()
	for _, b := range []string{"mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacctmgr"} {
		if _, err := exec.LookPath(b); err != nil {
			Missing(t, b, MariaDBInstall)
		}
	}
	data, tmp, err := installMariaDB(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	dbSock := filepath.Join(s.Dir, "run", "mariadb.sock")
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	db := exec.Command("mariadbd", "--no-defaults", "--datadir="+data, "--tmpdir="+tmp, "--socket="+dbSock, "--port="+strconv.Itoa(ports[0]),
		"--bind-address=127.0.0.1", "--user=root", "--innodb-buffer-pool-size=32M", "--skip-log-bin",
		"--log-error="+filepath.Join(s.Dir, "log", "mariadb.log"))
	if err := db.Start(); err != nil {
		t.Fatalf("starting mariadbd: %v", err)
	}
	s.mu.Lock()
	s.db = db
	s.mu.Unlock()
	s.waitFor("mariadbd", func() bool {
		return exec.Command("mariadb", "-S", dbSock, "-e",
			"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON *.* TO 'slurm'@'127.0.0.1'").Run() == nil
	})
	dbdConf := []string{
		"AuthType=auth/munge",
		"AuthInfo=socket=" + sock,
		"DbdAddr=127.0.0.1",
		"DbdHost=" + host,
		"DbdPort=" + strconv.Itoa(ports[1]),
		"SlurmUser=root",
		"PidFile=" + filepath.Join(s.Dir, "run", "slurmdbd.pid"),
		"LogFile=" + filepath.Join(s.Dir, "log", "slurmdbd.log"),
		"StorageType=accounting_storage/mysql",
		"StorageHost=127.0.0.1",
		"StoragePort=" + strconv.Itoa(ports[0]),
		"StorageUser=slurm",
		"StoragePass=slurm",
		"StorageLoc=slurm_acct_db",
	}
	// slurmdbd reads slurmdbd.conf next to slurm.conf, and only a file
	// of mode 0600 (it holds the database password).
	if err := os.WriteFile(filepath.Join(s.Dir, "slurmdbd.conf"), []byte(strings.Join(dbdConf, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.dbd = s.daemon("slurmdbd")
	s.mu.Unlock()
	return []string{
		"AccountingStorageType=accounting_storage/slurmdbd",
		"AccountingStorageHost=127.0.0.1",
		"AccountingStoragePort=" + strconv.Itoa(ports[1]),
		// For slurmdbd with munge, the "password" is the munge socket.
		"AccountingStoragePass=" + sock,
		"AccountingStorageEnforce=associations,limits,qos",
		"AccountingStoreFlags=job_comment",
		"AccountingStorageTRES=gres/gpu",
	}
}

// setupAccounting registers the cluster, the account ci and its users,
// then runs o.Setup.
func (s *Slurm) setupAccounting(o SlurmOptions) {
	t := s.t
	t.Helper()
	s.waitFor("slurmdbd", func() bool {
		return s.Command("sacctmgr", "-i", "add", "cluster", "skifftest").Run() == nil
	})
	cmds := [][]string{{"add", "account", "ci"}, {"add", "user", "root", "account=ci"}}
	for _, u := range o.Users {
		cmds = append(cmds, []string{"add", "user", u, "account=ci"})
	}
	for _, c := range append(cmds, o.Setup...) {
		if out, err := s.Command("sacctmgr", append([]string{"-i"}, c...)...).CombinedOutput(); err != nil {
			t.Fatalf("sacctmgr %v: %v\n%s", c, err, out)
		}
	}
}

// waitFor retries ready every 50 ms until it holds: a daemon that just
// started answers within seconds.
func (s *Slurm) waitFor(what string, ready func() bool) {
	s.t.Helper()
	Await(s.t, what+" to answer", 50*time.Millisecond, ready, func() string {
		var logs []string
		for _, f := range []string{what + ".log", what + ".out"} {
			if b, err := os.ReadFile(filepath.Join(s.Dir, "log", f)); err == nil {
				logs = append(logs, f+":\n"+string(b))
			}
		}
		return strings.Join(logs, "\n")
	})
}
