package loadtest

import (
	"fmt"
	"testing"

	"github.com/skiffci/skiff/pkg/ledger"
	"github.com/skiffci/skiff/pkg/provider"
	"github.com/skiffci/skiff/pkg/queue"
	"github.com/skiffci/skiff/pkg/scaledown"
)

// TestWithDefaults: a Config without jobs or store gets 100 jobs on the
// memory store; what is set stays.
func TestWithDefaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   Config
		want Config
	}{
		{"empty", Config{}, Config{Jobs: 100, Store: StoreMemory}},
		{"negative jobs", Config{Jobs: -1, Store: "dynalite"}, Config{Jobs: 100, Store: "dynalite"}},
		{"set", Config{Jobs: 7, Store: "moto", Seed: 3}, Config{Jobs: 7, Store: "moto", Seed: 3}},
	}
	for _, tc := range cases {
		if got := withDefaults(tc.in); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: withDefaults = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestPlantScaleDown: each scale-down plant blinds the one peer it names;
// the other functions' plants leave scale-down's peers as they are; an
// unknown plant is refused.
func TestPlantScaleDown(t *testing.T) {
	t.Parallel()
	type fakeGitHub struct{ scaledown.GitHub }
	type fakeLedger struct{ ledger.Ledger }
	type fakeProvider struct{ provider.Provider }
	type fakeSender struct{ queue.Sender }
	peers := scaleDownPeers{github: fakeGitHub{}, ledger: fakeLedger{}, provider: fakeProvider{}, replacements: fakeSender{}}
	const gh, led, prov, send = "loadtest.fakeGitHub", "loadtest.fakeLedger", "loadtest.fakeProvider", "loadtest.fakeSender"
	cases := []struct {
		plant string
		want  [4]string // the github, ledger, provider and replacements peers' types
	}{
		{"", [4]string{gh, led, prov, send}},
		{PlantIgnoreBusyFlag, [4]string{"loadtest.flagBlindGitHub", led, prov, send}},
		{PlantIgnoreLedgerStart, [4]string{gh, "loadtest.startBlindLedger", prov, send}},
		{PlantIgnoreHookTag, [4]string{gh, led, "loadtest.tagBlindProvider", send}},
		{PlantIgnoreRefusal, [4]string{"loadtest.refusalBlindGitHub", led, prov, send}},
		{PlantLoseReplacements, [4]string{gh, led, prov, "loadtest.lostSends"}},
		{PlantEndInterrupted, [4]string{gh, led, prov, send}},
		{PlantIgnoreClaims, [4]string{gh, led, prov, send}},
		{PlantTakeWithoutEnd, [4]string{gh, led, prov, send}},
	}
	for _, tc := range cases {
		got, err := plantScaleDown(tc.plant, peers)
		if err != nil {
			t.Errorf("plant %q: %v", tc.plant, err)
			continue
		}
		types := [4]string{fmt.Sprintf("%T", got.github), fmt.Sprintf("%T", got.ledger), fmt.Sprintf("%T", got.provider),
			fmt.Sprintf("%T", got.replacements)}
		if types != tc.want {
			t.Errorf("plant %q: peers %v, want %v", tc.plant, types, tc.want)
		}
	}
	if _, err := plantScaleDown("no-such-plant", peers); err == nil {
		t.Error("an unknown plant was accepted")
	}
}
