package metrics

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzDecoder checks Decoder against encoding/json: for any line, both
// fail, or both succeed with the same record.
func FuzzDecoder(f *testing.F) {
	for _, r := range Synthetic(7, 40, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)) {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range decoderCases {
		f.Add([]byte(s))
	}
	dec := NewDecoder()
	f.Fuzz(func(t *testing.T, line []byte) {
		var want, got Record
		wantErr := json.Unmarshal(line, &want)
		gotErr := dec.Decode(line, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("line %q: encoding/json %v, Decoder %v", line, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("line %q:\nencoding/json %+v\nDecoder       %+v", line, want, got)
		}
	})
}

// decoderCases are the corners of encoding/json's decoding that Decoder
// must keep, beyond the ones package jsonscan's webhook cases cover.
var decoderCases = []string{
	``, `null`, `[]`, `{}`, `{} {}`, `{"repository":"a/b"`, `{"runtime":"PT1M"}`, `{"runtime":null}`, `{"runtime":60}`,
	`{"runtime":"1m"}`, `{"runtime":"P1DT1H2M3.5S"}`, `{"runtime":"PT\u0031M"}`, `{"queueWait":null}`, `{"queueWait":"PT5S","queueWait":null}`,
	`{"queueWait":"PT5S","queueWait":"PT6S"}`, `{"queueWait":5}`, `{"jobId":1.5}`, `{"jobId":"1"}`, `{"runAttempt":9223372036854775808}`,
	`{"cpu":null}`, `{"cpu":{}}`, `{"cpu":5}`, `{"cpu":{"peakPercent":null}}`, `{"cpu":{"peakPercent":"1"}}`,
	`{"cpu":{"peakPercent":1e400}}`, `{"cpu":{"peakPercent":-0.5e-3,"meanPercent":2}}`, `{"cpu":{"peakPercent":1},"cpu":{"meanPercent":2}}`,
	`{"CPU":{"PeakPercent":1}}`, `{"Cost":{"EstimatedUSD":1,"estimate":true,"Estimate":null}}`, `{"cost":{"estimate":1}}`,
	`{"cost":{"estimatedUSD":null}}`, `{"cost":[]}`, `{"gpus":null}`, `{"gpus":[]}`, `{"gpus":{}}`, `{"gpus":[null]}`, `{"gpus":[1]}`,
	`{"gpus":[{"index":1,"model":"A10G"},{"index":2}],"gpus":[null,{"model":"x"},{}]}`, `{"gpus":[{"index":1}],"gpus":[]}`,
	`{"gpus":[{"index":1.5}]}`, `{"gpu":{"count":1,"model":"a10g","peakMemoryMiB":6000}}`, `{"gpu":{"index":1}}`, `{"gpu":{"count":null}}`,
	`{"labels":["a",null]}`, `{"labels":["a","b"],"labels":[null]}`, `{"missingSources":[]}`, `{"missingSources":"agent"}`,
	`{"interrupted":true,"interrupted":null}`, `{"interrupted":"yes"}`, `{"startedAt":"2026-10-01T00:00:00Z"}`,
	`{"startedAt":"2026-10-01"}`, `{"startedAt":null}`, `{"disk":{"peakRootPercent":30}}`, `{"disk":{"peakrootpercent":30}}`,
	`{"slurm":{"cluster":"hpc","partition":"gpu","nodes":"node[07-08]","jobId":"42","state":"COMPLETED"}}`, `{"slurm":null}`,
	`{"slurm":{"JobID":"1","Nodes":null}}`, `{"slurm":{"jobId":42}}`, `{"slurm":"hpc"}`, `{"slurm":{"cluster":"a"},"slurm":{"state":"b"}}`,
	`{"memory":{"peakPercent":50,"peakGiB":2}}`, `{"x":{"y":[1,2,{"z":null}]},"pool":"gpu"}`, `{"pool":"gpu",}`, `{"pool" "gpu"}`,
	"{\"repository\":\"\xff\"}", `{"repository":"a\u002fb"}`, `{"ｒepository":"a/b"}`, "{\"\u212aind\":1}",
	`{"cpu":{"seconds":1.5}}`, `{"host":{"cpuModel":"x","cpus":2,"memoryGiB":7.5,"gpuModel":"g","gpus":0}}`, `{"host":{"gpus":null}}`,
	`{"host":{"gpus":1},"host":{"gpus":null}}`, `{"host":{"cpus":1.5}}`, `{"host":null}`, `{"host":1}`,
	`{"cpu":` + strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001) + `}`,
}

// TestDecoder runs the corner cases and the synthetic records without fuzzing.
func TestDecoder(t *testing.T) {
	t.Parallel()
	cases := slicesOf(decoderCases)
	for _, r := range Synthetic(7, 200, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, b)
	}
	dec := NewDecoder()
	for _, line := range cases {
		var want, got Record
		wantErr := json.Unmarshal(line, &want)
		gotErr := dec.Decode(line, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("line %.100q: encoding/json %v, Decoder %v", line, wantErr, gotErr)
			continue
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Errorf("line %.100q:\nencoding/json %+v\nDecoder       %+v", line, want, got)
		}
	}
}

func slicesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// BenchmarkDecoder decodes synthetic records (≈ 890 bytes each) with
// Decoder, and with encoding/json for comparison.
func BenchmarkDecoder(b *testing.B) {
	var lines [][]byte
	for _, r := range Synthetic(42, 1000, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)) {
		l, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, l)
	}
	b.Run("Decoder", func(b *testing.B) {
		dec := NewDecoder()
		b.ReportAllocs()
		for b.Loop() {
			for _, l := range lines {
				var r Record
				if err := dec.Decode(l, &r); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, l := range lines {
				var r Record
				if err := json.Unmarshal(l, &r); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// TestRecordNamesInOrder: the member constants follow recordFields, which
// the case-folded lookup indexes.
func TestRecordNamesInOrder(t *testing.T) {
	t.Parallel()
	for i, n := range recordFields {
		if got := recordName([]byte(n)); got != member(i) {
			t.Errorf("recordName(%q) = %d, want %d", n, got, i)
		}
		if got := recordName([]byte(strings.ToUpper(n))); got != member(i) {
			t.Errorf("recordName(%q) = %d, want %d", strings.ToUpper(n), got, i)
		}
	}
	if got := recordName([]byte("nothing")); got != noMember {
		t.Errorf("recordName(nothing) = %d", got)
	}
}

// TestDecoderRecordsStayApart: records decoded one after another by one
// decoder share no value (the decoder hands out its batches' numbers,
// times and objects once each), so a kept record never changes.
func TestDecoderRecordsStayApart(t *testing.T) {
	t.Parallel()
	recs := Synthetic(3, 300, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))
	dec := NewDecoder()
	got := make([]Record, len(recs))
	for i, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := dec.Decode(line, &got[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range recs {
		want, _ := json.Marshal(recs[i])
		have, _ := json.Marshal(got[i])
		if !bytes.Equal(want, have) {
			t.Fatalf("record %d changed after later decodes:\nwant %s\ngot  %s", i, want, have)
		}
	}
}
