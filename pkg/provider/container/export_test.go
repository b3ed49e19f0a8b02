package container

// SetCeiling changes the host's ceiling of a provider (the conformance
// suite's "no capacity").
func SetCeiling(p *Provider, c Ceiling) {
	p.mu.Lock()
	p.o.Ceiling = c
	p.mu.Unlock()
}
