package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/runnerversion"
	"github.com/skiffci/skiff/pkg/store"
)

// RunRunnerState is the conformance suite of store.RunnerState: the release
// list round-trips (versions, dates to the nanosecond, checksums), and a
// pool's hold is recorded once per refused version and lifted.
func RunRunnerState(t *testing.T, newStore func(*testing.T) store.RunnerState) {
	t.Helper()
	ctx := context.Background()
	t.Run("release list", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if _, err := s.RunnerReleases(ctx); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("empty store: %v, want ErrNotFound", err)
		}
		l := store.ReleaseList{FetchedAt: Now.Add(123 * time.Nanosecond), Releases: []runnerversion.Release{
			{Version: runnerversion.Version{Major: 2, Minor: 334}, PublishedAt: Now.Add(-time.Hour),
				SHA256: map[string]string{"linux-x64": "aa", "linux-arm64": "bb"}},
			{Version: runnerversion.Version{Major: 2, Minor: 333, Patch: 1}, PublishedAt: Now.Add(-40 * 24 * time.Hour),
				SHA256: map[string]string{}},
		}}
		for range 2 { // a replacement, too
			if err := s.PutRunnerReleases(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.RunnerReleases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !got.FetchedAt.Equal(l.FetchedAt) || len(got.Releases) != 2 || got.Releases[0].Version != l.Releases[0].Version ||
			!got.Releases[1].PublishedAt.Equal(l.Releases[1].PublishedAt) || got.Releases[0].SHA256["linux-arm64"] != "bb" ||
			got.Releases[1].Version.Patch != 1 {
			t.Errorf("release list %+v, want %+v", got, l)
		}
	})
	t.Run("holds", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		h := store.RunnerHold{Pool: "cpu", Version: "2.330.0", Launched: "2.334.0", Reason: "runner_outdated", Detail: "update the image",
			At: Now.UTC(), Until: Now.Add(6 * time.Hour).UTC()}
		if ok, err := s.HoldPool(ctx, h); !ok || err != nil {
			t.Fatalf("first hold: %v %v", ok, err)
		}
		again := h
		again.At = Now.Add(time.Minute).UTC()
		if ok, err := s.HoldPool(ctx, again); ok || err != nil {
			t.Fatalf("the same version held twice: %v %v", ok, err)
		}
		other := store.RunnerHold{Pool: "a-gpu", Reason: "runner_outdated", At: Now.UTC()}
		if ok, err := s.HoldPool(ctx, other); !ok || err != nil {
			t.Fatal(ok, err)
		}
		hs, err := s.PoolHolds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(hs, []store.RunnerHold{other, h}) {
			t.Errorf("holds %+v", hs)
		}
		newer := h
		newer.Version = "2.331.0"
		if ok, err := s.HoldPool(ctx, newer); !ok || err != nil {
			t.Fatalf("another version: %v %v", ok, err)
		}
		if err := s.ReleasePool(ctx, "cpu"); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleasePool(ctx, "none"); err != nil {
			t.Fatal(err)
		}
		hs, _ = s.PoolHolds(ctx)
		if len(hs) != 1 || hs[0].Pool != "a-gpu" {
			t.Errorf("after release: %+v", hs)
		}
		if _, err := s.HoldPool(ctx, store.RunnerHold{Pool: "x"}); err == nil {
			t.Error("a hold without reason was written")
		}
	})
	t.Run("installed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if ins, err := s.InstalledRunners(ctx); err != nil || len(ins) != 0 {
			t.Fatalf("empty store: %+v %v", ins, err)
		}
		cpu := store.InstalledRunner{Pool: "cpu", Version: "2.330.0", SeenAt: Now.Add(7 * time.Nanosecond).UTC()}
		gpu := store.InstalledRunner{Pool: "a-gpu", Version: "2.334.0", SeenAt: Now.UTC()}
		for _, in := range []store.InstalledRunner{cpu, gpu} {
			if err := s.PutInstalled(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
		newer := cpu
		newer.Version, newer.SeenAt = "2.334.0", Now.Add(time.Hour).UTC()
		if err := s.PutInstalled(ctx, newer); err != nil {
			t.Fatal(err)
		}
		ins, err := s.InstalledRunners(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ins, []store.InstalledRunner{gpu, newer}) {
			t.Errorf("installed %+v, want %+v", ins, []store.InstalledRunner{gpu, newer})
		}
		if err := s.PutInstalled(ctx, store.InstalledRunner{Pool: "x", SeenAt: Now}); err == nil {
			t.Error("an installed runner without a version was written")
		}
	})
}
