package pool_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/pool"
	"github.com/skiffci/skiff/pkg/pool/poolfile"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
	return loc
}

func TestWarmOn(t *testing.T) {
	t.Parallel()
	weekdays := []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}
	berlin := &pool.Warm{Stopped: 2, TimeZone: "Europe/Berlin", Location: mustZone(t, "Europe/Berlin"),
		Schedules: []pool.Schedule{{Days: weekdays, From: 8 * 60, To: 18 * 60}}}
	newYork := &pool.Warm{Hot: 1, TimeZone: "America/New_York", Location: mustZone(t, "America/New_York"),
		Schedules: []pool.Schedule{{Days: weekdays, From: 8 * 60, To: 18 * 60}}}
	night := &pool.Warm{Hot: 1, Location: time.UTC, Schedules: []pool.Schedule{{Days: []time.Weekday{time.Friday}, From: 22 * 60, To: 2 * 60}}}
	always := &pool.Warm{Hot: 1}
	utc := func(s string) time.Time {
		ts, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	tests := []struct {
		name string
		w    *pool.Warm
		at   string
		on   bool
	}{
		// Berlin leaves CET (UTC+1) for CEST (UTC+2) on Sunday 2026-03-29.
		{"berlin 08:30 CET on the friday before", berlin, "2026-03-27T07:30:00Z", true},
		{"berlin 07:30 CET on the friday before", berlin, "2026-03-27T06:30:00Z", false},
		{"berlin 08:30 CEST on the monday after", berlin, "2026-03-30T06:30:00Z", true},
		{"berlin 07:30 CEST on the monday after is 06:30 UTC a week before's 07:30", berlin, "2026-03-30T05:30:00Z", false},
		{"berlin 17:59 CEST", berlin, "2026-03-30T15:59:00Z", true},
		{"berlin 18:00 CEST ends it", berlin, "2026-03-30T16:00:00Z", false},
		{"berlin sunday", berlin, "2026-03-29T10:00:00Z", false},
		// New York goes back from EDT (UTC-4) to EST (UTC-5) on Sunday 2026-11-01.
		{"new york 08:00 EDT on the friday before", newYork, "2026-10-30T12:00:00Z", true},
		{"new york 07:00 EST on the monday after", newYork, "2026-11-02T12:00:00Z", false},
		{"new york 08:00 EST on the monday after", newYork, "2026-11-02T13:00:00Z", true},
		{"past midnight: friday 23:00", night, "2026-12-04T23:00:00Z", true},
		{"past midnight: saturday 01:59", night, "2026-12-05T01:59:00Z", true},
		{"past midnight: saturday 02:00", night, "2026-12-05T02:00:00Z", false},
		{"past midnight: thursday 23:00", night, "2026-12-03T23:00:00Z", false},
		{"no schedules", always, "2026-12-06T03:00:00Z", true},
		{"no warm section", nil, "2026-12-06T03:00:00Z", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.w.On(utc(tt.at)); got != tt.on {
				t.Errorf("On(%s) = %v, want %v", tt.at, got, tt.on)
			}
			stopped, hot := tt.w.Counts(utc(tt.at))
			if want := tt.on && tt.w.Total() > 0; (stopped+hot > 0) != want {
				t.Errorf("Counts(%s) = %d, %d; want some: %v", tt.at, stopped, hot, want)
			}
		})
	}
}

func TestWarmHoursPerWeek(t *testing.T) {
	t.Parallel()
	weekdays := []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}
	tests := []struct {
		name string
		w    *pool.Warm
		want float64
	}{
		{"always", &pool.Warm{Hot: 1}, 168},
		{"working hours", &pool.Warm{Schedules: []pool.Schedule{{Days: weekdays, From: 8 * 60, To: 18 * 60}}}, 50},
		{"overlaps count once", &pool.Warm{Schedules: []pool.Schedule{{Days: weekdays, From: 8 * 60, To: 18 * 60}, {Days: []time.Weekday{time.Monday}, From: 17 * 60, To: 19 * 60}}}, 51},
		{"past midnight wraps the week", &pool.Warm{Schedules: []pool.Schedule{{Days: []time.Weekday{time.Saturday}, From: 22 * 60, To: 2 * 60}}}, 4},
		{"to 24:00", &pool.Warm{Schedules: []pool.Schedule{{Days: []time.Weekday{time.Sunday}, From: 0, To: 24 * 60}}}, 24},
		{"none", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.w.HoursPerWeek(); got != tt.want {
				t.Errorf("HoursPerWeek = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWarmCostPerDay(t *testing.T) {
	t.Parallel()
	spec := pool.Spec{Shared: pool.Shared{Architecture: "x64"}, EC2: &pool.EC2{InstanceTypes: []string{"c7i.large"}, DiskGiB: 30}}
	volume := 30 * pool.GP3PerGiBMonth / 730
	weekdays := []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}
	tests := []struct {
		name string
		w    *pool.Warm
		want float64
	}{
		{"one hot always", &pool.Warm{Hot: 1}, 24 * (0.08925 + volume)},
		{"two stopped in working hours", &pool.Warm{Stopped: 2, Schedules: []pool.Schedule{{Days: weekdays, From: 8 * 60, To: 18 * 60}}}, 50.0 / 7 * 2 * volume},
		{"none", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, unpriced := spec.WarmCostPerDay(tt.w)
			if unpriced || math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("WarmCostPerDay = %v (unpriced %v), want %v", got, unpriced, tt.want)
			}
		})
	}
}

// warmPool is a pool with a warm: section; extra is indented at the pool's level.
func warmPool(capacity, warm, extra string) string {
	return head + "pools:\n  - name: a\n    labels: [x]\n    instanceTypes: [c7i.large]\n    capacity: " + capacity +
		"\n    maxRunners: 4\n" + extra + "    warm: " + warm + "\n"
}

func TestWarmValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		yaml     string
		severity pool.Severity // "" for none
		msg      string
	}{
		{"on-demand stopped and hot", warmPool("on-demand", "{stopped: 2, hot: 1, maxAge: 12h, timeZone: Europe/Berlin, schedules: [{days: [mon, fri], from: \"08:00\", to: \"18:00\"}]}", ""), "", ""},
		{"spot hot", warmPool("spot", "{hot: 2}", ""), "", ""},
		{"spot stopped", warmPool("spot", "{stopped: 1}", ""), pool.SeverityError, "a stopped spot instance is not one to rely on"},
		{"spot-then-on-demand stopped", warmPool("spot-then-on-demand", "{stopped: 1}", ""), pool.SeverityWarning, "launch on-demand"},
		{"beyond maxRunners", warmPool("on-demand", "{stopped: 3, hot: 2}", ""), pool.SeverityError, "maxRunners is 4"},
		{"exactly maxRunners", warmPool("on-demand", "{stopped: 2, hot: 2}", ""), "", ""},
		{"unknown time zone", warmPool("on-demand", "{hot: 1, timeZone: Europe/Atlantis}", ""), pool.SeverityError, "not an IANA time zone"},
		{"short maxAge", warmPool("on-demand", "{hot: 1, maxAge: 10m}", ""), pool.SeverityError, "between 30m and 120h"},
		{"nothing warm", warmPool("on-demand", "{maxAge: 2h}", ""), pool.SeverityWarning, "no stopped or hot"},
		{"bad clock", warmPool("on-demand", "{hot: 1, schedules: [{days: [mon], from: \"8:00\", to: \"18:00\"}]}", ""), pool.SeverityError, "does not match pattern"},
		{"dynamic sizes", warmPool("on-demand", "{hot: 1}", "    dynamic: {maxCpu: 8}\n"), pool.SeverityWarning, "launches cold"},
		{"gpu pool", head + "pools:\n  - name: g\n    labels: [gpu]\n    instanceTypes: [g6.xlarge]\n    capacity: on-demand\n    image: {ssm: " + gpuSSM + "}\n    warm: {stopped: 1, hot: 1}\n", "", ""},
		{"off EC2", head + "pools:\n  - name: s\n    labels: [x]\n    slurm: {partition: batch}\n    warm: {hot: 1}\n", pool.SeverityError, "EC2 only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := poolfile.Parse([]byte(tt.yaml), "pools.yaml")
			var diags []pool.Diagnostic
			if err != nil {
				ve, ok := err.(*poolfile.ValidationError)
				if !ok {
					t.Fatalf("Parse: %v", err)
				}
				diags = ve.Diagnostics
			} else {
				diags = cfg.Warnings
			}
			if tt.severity == "" {
				if len(diags) != 0 {
					t.Fatalf("findings = %v, want none", diags)
				}
				return
			}
			for _, d := range diags {
				if d.Severity == tt.severity && strings.Contains(d.Message, tt.msg) {
					return
				}
			}
			t.Errorf("findings = %v; want a %s containing %q", diags, tt.severity, tt.msg)
		})
	}
}
