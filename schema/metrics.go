package schema

import _ "embed"

// Metrics is schema/metrics.schema.json: the public contract of a metrics
// record (docs/metrics.md).
//
//go:embed metrics.schema.json
var Metrics []byte
