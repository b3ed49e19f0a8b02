package github

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sync/singleflight"
)

// TestSharedOutlivesItsFirstCaller: a caller whose context ends returns at
// once, and the shared call goes on with a context of its own, so that the
// callers still waiting for it get its result.
func TestSharedOutlivesItsFirstCaller(t *testing.T) {
	t.Parallel()
	var g singleflight.Group
	started, release := make(chan struct{}), make(chan struct{})
	fnCtxErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() {
		_, err := shared(ctx, &g, "token/1", time.Minute, func(fctx context.Context) (any, error) {
			close(started)
			<-release
			fnCtxErr <- fctx.Err()
			return "minted", nil
		})
		returned <- err
	}()
	<-started
	cancel()
	if err := <-returned; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller got %v, want context.Canceled", err)
	}
	close(release)
	if err := <-fnCtxErr; err != nil {
		t.Errorf("the shared call's context ended with its first caller's: %v", err)
	}
}
