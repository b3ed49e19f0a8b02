package testenv

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/skiffci/skiff/pkg/github/ghsim"
)

// AppID is the GitHub App of GitHubApp.
const AppID = 77

// GitHubApp starts the GitHub simulator for t, closed when t ends, with
// App AppID ("skiff") installed on the organisation acme, which has the
// repository acme/app; the secrets it hands out start with prefix. It
// returns the simulator and the App's private key in PEM.
func GitHubApp(t testing.TB, prefix string) (*ghsim.Server, string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	sim := ghsim.New(ghsim.Options{SecretPrefix: prefix})
	t.Cleanup(sim.Close)
	sim.AddApp(ghsim.AppConfig{ID: AppID, Slug: "skiff", PublicKey: &key.PublicKey})
	sim.AddOrg("acme")
	sim.AddRepo("acme", "app")
	sim.Install(AppID, "acme")
	return sim, pemKey
}
