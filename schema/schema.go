// Package schema embeds skiff's JSON Schemas (2020-12) so that binaries and
// Lambda packages validate documents without reading files at run time.
package schema

import _ "embed"

// Pools is schema/pools.schema.json: the operator's pools file.
//
//go:embed pools.schema.json
var Pools []byte
