package skiff

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

// TestCheckBackends: the AWS stack launches EC2 pools only, so a pools file
// with a pool of another backend is refused at synth, naming the pool.
func TestCheckBackends(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file string
		bad  []string
	}{
		{"pools.yaml", nil},
		{"backends.yaml", []string{`"hpc" runs on slurm`, `"pods" runs on kubernetes`, `"lab" runs on process`, `"boxes" runs on container`}},
	} {
		cfg, err := poolfile.Load(filepath.Join("..", "..", "examples", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		err = checkBackends(cfg)
		if len(tt.bad) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tt.file, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidProps) {
			t.Fatalf("%s: %v, want ErrInvalidProps", tt.file, err)
		}
		for _, b := range tt.bad {
			if !strings.Contains(err.Error(), b) {
				t.Errorf("%s: %v lacks %s", tt.file, err, b)
			}
		}
		if strings.Contains(err.Error(), `"cloud"`) {
			t.Errorf("%s: the EC2 pool is refused too: %v", tt.file, err)
		}
	}
}
