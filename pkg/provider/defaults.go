package provider

import (
	"log/slog"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
)

// DefaultRetain is how long a provider keeps an ended runner listed: long
// enough for the reconciler's next passes, and the usage record, to read
// how it ended.
const DefaultRetain = time.Hour

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
