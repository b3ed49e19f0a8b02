package schema

import (
	"bytes"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestMetricsSchema checks the metrics schema against the 2020-12
// meta-schema, that the embedded bytes are the file, that it keeps the
// draft's required set exactly, and that every property is documented.
func TestMetricsSchema(t *testing.T) {
	t.Parallel()
	onDisk, err := os.ReadFile("metrics.schema.json")
	if err != nil || !bytes.Equal(onDisk, Metrics) {
		t.Fatalf("embedded metrics.schema.json differs from the file (%v)", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Metrics))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("metrics.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compile("metrics.schema.json"); err != nil {
		t.Fatalf("compiling: %v", err)
	}
	m := doc.(map[string]any)
	var req []string
	for _, r := range m["required"].([]any) {
		req = append(req, r.(string))
	}
	want := []string{"repository", "workflowName", "trigger", "cloudProvider", "instanceType", "runtime"}
	if len(req) != len(want) {
		t.Fatalf("required = %v, want the draft's %v", req, want)
	}
	for i := range want {
		if req[i] != want[i] {
			t.Fatalf("required = %v, want the draft's %v", req, want)
		}
	}
	var walk func(path string, props map[string]any)
	walk = func(path string, props map[string]any) {
		for name, p := range props {
			pm := p.(map[string]any)
			if d, _ := pm["description"].(string); d == "" {
				t.Errorf("%s%s has no description", path, name)
			}
			if sub, ok := pm["properties"].(map[string]any); ok {
				walk(path+name+".", sub)
			}
			if items, ok := pm["items"].(map[string]any); ok {
				if sub, ok := items["properties"].(map[string]any); ok {
					walk(path+name+"[].", sub)
				}
			}
		}
	}
	walk("", m["properties"].(map[string]any))
}
