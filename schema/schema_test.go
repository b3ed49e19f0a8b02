package schema

import (
	"bytes"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestSchemasCompile checks each embedded schema against the 2020-12
// meta-schema with a real validator, and that the embedded bytes are the file.
func TestSchemasCompile(t *testing.T) {
	t.Parallel()
	for name, data := range map[string][]byte{"pools.schema.json": Pools} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			onDisk, err := os.ReadFile(name)
			if err != nil || !bytes.Equal(onDisk, data) {
				t.Fatalf("embedded %s differs from the file (%v)", name, err)
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			m, _ := doc.(map[string]any)
			if m["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v, want 2020-12", m["$schema"])
			}
			c := jsonschema.NewCompiler()
			if err := c.AddResource(name, doc); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Compile(name); err != nil {
				t.Errorf("compiling: %v", err)
			}
		})
	}
}
