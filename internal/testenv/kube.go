package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// KubeInstall says how to get the Kubernetes provider's test servers.
const KubeInstall = "run scripts/build-kube-test-servers.sh (make deps does): it builds kube-apiserver v1.37.2 and etcd v3.7.3 from the Go module proxy into $(go env GOPATH)/bin, about 5 minutes and 2.5 GB once"

// The users the test API server knows, by bearer token (KubeCluster.Token).
const (
	// KubeAdmin is in system:masters: it may do anything (test setup).
	KubeAdmin = "admin"
	// KubeUser has no permission of its own: tests bind it to the Role
	// that skiff's manifests give its service account, and it is who the
	// provider under test authenticates as.
	KubeUser = "skiff"
)

// KubeCluster is a real kube-apiserver with its etcd, on 127.0.0.1: no
// controller manager, no scheduler, no kubelet. Tests isolate themselves
// with namespaces of their own (a deleted namespace stays Terminating: no
// controller finishes it).
type KubeCluster struct {
	// URL is the API server's https root.
	URL string
	// CA is the PEM of the certificate to trust (the API server's own,
	// self-signed).
	CA []byte
	// Dir holds the servers' files and logs (apiserver.log, etcd.log).
	Dir    string
	tokens map[string]string
}

// Token returns the bearer token of a user (KubeAdmin, KubeUser).
func (c *KubeCluster) Token(user string) string { return c.tokens[user] }

var kube sharedServer[*KubeCluster]

// KubeAPIServer returns the test binary's API server, starting etcd and
// kube-apiserver on first use on free ports of 127.0.0.1; Main stops them,
// so the package must call Main from TestMain. Missing binaries skip or
// fail the test (see Missing and KubeInstall).
func KubeAPIServer(t testing.TB) *KubeCluster {
	t.Helper()
	needMain(t, "KubeAPIServer")
	apiserver := LookTool(t, "kube-apiserver", KubeInstall)
	etcd := LookTool(t, "etcd", KubeInstall)
	return kube.get(t, "kube-apiserver", func(ctx context.Context) (*KubeCluster, error) { return startKube(ctx, apiserver, etcd) })
}

func startKube(ctx context.Context, apiserver, etcd string) (*KubeCluster, error) {
	dir, err := os.MkdirTemp("", "skiff-kube-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &KubeCluster{URL: "https://127.0.0.1:" + strconv.Itoa(ports[2]), Dir: dir, tokens: map[string]string{}}
	var lines []string
	for i, user := range []string{KubeAdmin, KubeUser} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		c.tokens[user] = hex.EncodeToString(b)
		line := fmt.Sprintf("%s,%s,uid-%d", c.tokens[user], user, i)
		if user == KubeAdmin {
			line += `,"system:masters"`
		}
		lines = append(lines, line)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := writeSAKeys(dir); err != nil {
		return nil, err
	}
	ec, ep := "http://127.0.0.1:"+strconv.Itoa(ports[0]), "http://127.0.0.1:"+strconv.Itoa(ports[1])
	stopEtcd, _, err := startDaemon(filepath.Join(dir, "etcd.log"), etcd, "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", ec, "--advertise-client-urls", ec, "--listen-peer-urls", ep,
		"--initial-advertise-peer-urls", ep, "--initial-cluster", "default="+ep, "--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	certs := filepath.Join(dir, "certs")
	stopAPI, exited, err := startDaemon(filepath.Join(dir, "apiserver.log"), apiserver,
		"--etcd-servers="+ec, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", "--secure-port="+strconv.Itoa(ports[2]), "--cert-dir="+certs,
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"), "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true")
	if err != nil {
		stopEtcd()
		return nil, fmt.Errorf("starting kube-apiserver: %w", err)
	}
	stop := func() {
		stopAPI()
		stopEtcd()
		_ = os.RemoveAll(dir)
	}
	if err := c.waitReady(ctx, filepath.Join(certs, "apiserver.crt"), exited); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "apiserver.log"))
		stop()
		return nil, fmt.Errorf("%w\n%s", err, tail(string(log), 3000))
	}
	atExit(stop)
	return c, nil
}

// writeSAKeys writes the service-account signing key pair the API server
// requires (it issues no token here: Pods mount none).
func writeSAKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// startDaemon starts a server with its output in logFile. It dies with the
// test binary (a parent-death signal on Linux) if Main does not stop it.
func startDaemon(logFile, bin string, args ...string) (stop func(), exited <-chan struct{}, err error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = daemonAttr()
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(done)
	}()
	return func() {
		_ = cmd.Process.Kill()
		<-done
	}, done, nil
}

// waitReady polls /readyz until the API server answers ok: it writes its
// serving certificate first, then serves, then becomes ready once its
// post-start hooks (the RBAC bootstrap roles among them) have run. There
// is no line in its log that says so.
func (c *KubeCluster) waitReady(ctx context.Context, certFile string, exited <-chan struct{}) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := errors.New("no certificate yet")
	for {
		if ca, err := os.ReadFile(certFile); err == nil {
			c.CA = ca
			if last = c.readyz(); last == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("kube-apiserver exited before it was ready: %v", last)
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready before the test binary's timeout was near: %v", last)
		case <-tick.C:
		}
	}
}

func (c *KubeCluster) readyz() error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return errors.New("the serving certificate does not parse yet")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, c.URL+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.tokens[KubeAdmin])
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
