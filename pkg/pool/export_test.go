package pool

// Exported for the tests of package pool_test, which load files with
// package poolfile (an import this package's own tests cannot make).

// AmbiguousYAML is ambiguousYAML, for pool_test.
var AmbiguousYAML = ambiguousYAML

// ImpliedLabels is impliedLabels, for pool_test.
var ImpliedLabels = impliedLabels
