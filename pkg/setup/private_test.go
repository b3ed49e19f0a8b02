package setup_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/setup"
)

// TestCheckPrivate: a data directory or secret file that other users can
// read, write or enter is refused, naming the path and the chmod that
// fixes it; skiff setup's own modes pass.
func TestCheckPrivate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		dir  bool
		mode os.FileMode
		fix  string // "" when it passes
	}{
		{"private directory", true, 0o700, ""},
		{"directory others can read", true, 0o755, "chmod 700 "},
		{"directory the group can enter", true, 0o710, "chmod 700 "},
		{"private key file", false, 0o600, ""},
		{"key file others can read", false, 0o644, "chmod 600 "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "data")
			var err error
			if tc.dir {
				err = os.Mkdir(path, 0o700)
			} else {
				err = os.WriteFile(path, []byte("k"), 0o600)
			}
			if err == nil {
				err = os.Chmod(path, tc.mode)
			}
			if err != nil {
				t.Fatal(err)
			}
			err = setup.CheckPrivate(path)
			switch {
			case tc.fix == "" && err != nil:
				t.Errorf("CheckPrivate(%04o) = %v, want nil", tc.mode, err)
			case tc.fix != "" && (err == nil || !strings.Contains(err.Error(), tc.fix+path)):
				t.Errorf("CheckPrivate(%04o) = %v, want an error saying %q", tc.mode, err, tc.fix+path)
			}
		})
	}
}

// TestLoadLocalAppRefusesAnOpenDirectory: skiff local does not read the
// App's key from a data directory others can read.
func TestLoadLocalAppRefusesAnOpenDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{setup.AppKeyFile: `{"1":"pem"}`, setup.WebhookSecretFile: "s"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok, err := setup.LoadLocalApp(dir); !ok || err != nil {
		t.Fatalf("a private data directory: ok %v, %v", ok, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := setup.LoadLocalApp(dir); err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
		t.Errorf("a data directory others can read: %v, want a refusal saying chmod 700 %s", err, dir)
	}
}
