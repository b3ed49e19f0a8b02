package provider

import (
	"log/slog"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
)

// FillDefaults sets the options every provider shares where they are
// unset: the lifetime of a runner whose pool sets none
// (pool.DefaultMaxLifetime), the logger (slog.Default) and the clock
// (time.Now).
func FillDefaults(lifetime *time.Duration, logger **slog.Logger, now *func() time.Time) {
	if *lifetime <= 0 {
		*lifetime = pool.DefaultMaxLifetime
	}
	if *logger == nil {
		*logger = slog.Default()
	}
	if *now == nil {
		*now = time.Now
	}
}
