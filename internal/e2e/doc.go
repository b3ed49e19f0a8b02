// Package e2e holds end-to-end tests that drive skiff's services together
// through the GitHub simulator: signed webhooks into the real webhook
// handler, its queue into scale-up, and scale-up's GitHub calls back into
// the simulator. It has no code of its own; it exists so that such tests
// can import every service without an import cycle.
package e2e
