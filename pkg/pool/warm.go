package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultWarmMaxAge bounds how long a warm instance waits for a job: a day
// keeps its image, packages and runner at most a day behind a cold launch,
// and replaces it daily at the price of one launch.
const DefaultWarmMaxAge = 24 * time.Hour

// WarmKind is how a warm instance waits for its job.
type WarmKind string

// The kinds of warm instance.
const (
	// WarmStopped: launched, booted up to the registration wait, then
	// stopped; a job starts it (on-demand only).
	WarmStopped WarmKind = "stopped"
	// WarmHot: launched and booted, running, waiting for its registration.
	WarmHot WarmKind = "hot"
)

// Warm is a pool's warm capacity (EC2 only): how many instances it keeps
// launched ahead of its jobs, stopped or hot, and when.
type Warm struct {
	// Stopped and Hot are the counts kept while a schedule is on (always,
	// without schedules).
	Stopped int
	Hot     int
	// MaxAge is how old a warm instance may get before it is replaced.
	MaxAge time.Duration
	// TimeZone is the IANA name the schedules are read in ("UTC" by default);
	// Location is it loaded.
	TimeZone string
	Location *time.Location
	// Schedules are when the counts hold; none: at all hours.
	Schedules []Schedule

	maxAge string // maxAge as written
}

// Schedule is a weekly window: it starts at From on each of Days and ends
// at To (the next day when To is not after From).
type Schedule struct {
	Days []time.Weekday
	// From and To are minutes after local midnight; To may be 24*60.
	From, To int
}

// Total is the warm count at full strength.
func (w *Warm) Total() int {
	if w == nil {
		return 0
	}
	return w.Stopped + w.Hot
}

// On reports whether the warm counts hold at t: t falls, in the warm
// time zone's wall clock, inside one of the schedules (or there are none).
func (w *Warm) On(t time.Time) bool {
	if w == nil {
		return false
	}
	if len(w.Schedules) == 0 {
		return true
	}
	loc := w.Location
	if loc == nil {
		loc = time.UTC
	}
	local := t.In(loc)
	minute := local.Hour()*60 + local.Minute()
	today, yesterday := local.Weekday(), (local.Weekday()+6)%7
	for _, s := range w.Schedules {
		if s.To > s.From {
			if s.has(today) && minute >= s.From && minute < s.To {
				return true
			}
			continue
		}
		// Past midnight: the evening of a start day, or the morning after.
		if s.has(today) && minute >= s.From || s.has(yesterday) && minute < s.To {
			return true
		}
	}
	return false
}

// Counts are the warm counts wanted at t: the configured ones inside a
// schedule, none outside.
func (w *Warm) Counts(t time.Time) (stopped, hot int) {
	if !w.On(t) {
		return 0, 0
	}
	return w.Stopped, w.Hot
}

// HoursPerWeek is how many hours a week the schedules hold (168 without
// schedules), counted on the wall clock: a week with a daylight saving
// change has an hour more or less, which the estimate leaves out.
func (w *Warm) HoursPerWeek() float64 {
	if w == nil {
		return 0
	}
	if len(w.Schedules) == 0 {
		return 168
	}
	// Overlapping schedules count once: mark the week's minutes.
	var week [7 * 24 * 60]bool
	for _, s := range w.Schedules {
		length := s.To - s.From
		if length <= 0 {
			length += 24 * 60
		}
		for _, d := range s.Days {
			start := int(d)*24*60 + s.From
			for m := range length {
				week[(start+m)%len(week)] = true
			}
		}
	}
	on := 0
	for _, b := range week {
		if b {
			on++
		}
	}
	return float64(on) / 60
}

func (s Schedule) has(d time.Weekday) bool { return slices.Contains(s.Days, d) }

// weekdays maps the schema's day names to time.Weekday.
var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// clock parses the schema's HH:MM into minutes after midnight.
func clock(s string) int {
	h, m, ok := strings.Cut(s, ":")
	if !ok {
		return 0
	}
	hh, _ := strconv.Atoi(h)
	mm, _ := strconv.Atoi(m)
	return hh*60 + mm
}

// decodeWarm reads a pool's warm: mapping (the schema has checked its
// shape); the time zone and maxAge are checked by package poolfile.
func decodeWarm(v any) *Warm {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	w := &Warm{Stopped: num(m["stopped"]), Hot: num(m["hot"]), TimeZone: str(m["timeZone"]),
		maxAge: str(m["maxAge"]), MaxAge: DefaultWarmMaxAge}
	if w.TimeZone == "" {
		w.TimeZone = "UTC"
	}
	if loc, err := time.LoadLocation(w.TimeZone); err == nil {
		w.Location = loc
	}
	if d, err := time.ParseDuration(w.maxAge); err == nil && d > 0 {
		w.MaxAge = d
	}
	for _, raw := range asList(m["schedules"]) {
		sm, _ := raw.(map[string]any)
		s := Schedule{From: clock(str(sm["from"])), To: clock(str(sm["to"]))}
		for _, d := range strs(sm["days"]) {
			s.Days = append(s.Days, weekdays[d])
		}
		w.Schedules = append(w.Schedules, s)
	}
	return w
}

// WarmKey is the short hash of what a warm machine of the spec is made
// with: the backend's part (image, instance types, subnets, disk,
// capacity, tags), the sizes, and the runner it installs (runnerVersion:
// the version a boot downloads, as scale-up resolves it; "" for none). A
// job takes only a warm machine with its own spec's key — so never one it
// cannot run — and the reconciler replaces one whose key is no longer the
// pool's (a new image, runner or launch settings).
func (s Spec) WarmKey(runnerVersion string) string {
	b, _ := json.Marshal(struct {
		EC2    *EC2
		Sizes  Sizes
		Arch   string
		Runner string
	}{s.EC2, s.Sizes, s.Architecture, runnerVersion})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:5])
}

// WarmCostPerDay is what the pool's warm capacity costs per day on
// average over a week, in USD at the price table's on-demand prices:
// hot instances at the cheapest candidate's hourly price, stopped ones
// at their root volume's gp3 price (GP3PerGiBMonth), each for the hours
// the schedules hold. unpriced: no candidate is in the price table (the
// hot part is then left out).
func (s Spec) WarmCostPerDay(w *Warm) (usd float64, unpriced bool) {
	if w == nil || s.EC2 == nil {
		return 0, false
	}
	hoursPerDay := w.HoursPerWeek() / 7
	lo, _, _ := s.PriceRange()
	unpriced = lo == 0 && w.Hot > 0
	volumePerHour := float64(s.EC2.DiskGiB) * GP3PerGiBMonth / hoursPerMonth
	usd = hoursPerDay * (float64(w.Hot)*(lo+volumePerHour) + float64(w.Stopped)*volumePerHour)
	return usd, unpriced
}

// GP3PerGiBMonth is the gp3 volume price per GiB-month in us-east-1 (the
// price table's region), which a stopped instance keeps paying.
const GP3PerGiBMonth = 0.08

// hoursPerMonth is AWS's month for EBS pricing (730 hours).
const hoursPerMonth = 730

// MinWarmMaxAge is the shortest maxAge: a warm instance takes minutes to
// launch, boot and stop, so a shorter age would replace instances faster
// than they become usable.
const MinWarmMaxAge = 30 * time.Minute
