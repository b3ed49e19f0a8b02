package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skiffci/skiff/pkg/metrics"
)

// decodeRecordCases are corners of encoding/json's decoding that a records
// file may hit: nulls, repeated and case-folded members, wrong types,
// numbers out of range, durations, nesting.
var decodeRecordCases = []string{
	``, `null`, `[]`, `{}`, `{} {}`, `{"repository":"a/b"`, `{"runtime":"PT1M"}`, `{"runtime":null}`, `{"runtime":60}`,
	`{"runtime":"1m"}`, `{"runtime":"P1DT1H2M3.5S"}`, `{"queueWait":null}`, `{"queueWait":"PT5S","queueWait":null}`,
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
	`{"repository":"a\u002fb"}`, "{\"repository\":\"\xff\"}", `{"ｒepository":"a/b"}`, "{\"\u212aind\":1}", `{"runtime":"PT\u0031M"}`, `{"cpu":{"seconds":1.5}}`, `{"host":{"cpuModel":"x","cpus":2,"memoryGiB":7.5,"gpuModel":"g","gpus":0}}`,
	`{"host":{"gpus":null}}`, `{"host":{"gpus":1},"host":{"gpus":null}}`, `{"host":{"cpus":1.5}}`, `{"host":null}`, `{"host":1}`,
	`{"x":` + strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100) + `}`,
}

// TestDecodeRecord checks decodeRecord against encoding/json on the corner
// cases and on synthetic records: both fail, or both give the same record.
func TestDecodeRecord(t *testing.T) {
	t.Parallel()
	cases := decodeRecordCases
	for _, r := range metrics.Synthetic(7, 300, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, string(b))
	}
	for _, line := range cases {
		var want, got metrics.Record
		wantErr := json.Unmarshal([]byte(line), &want)
		gotErr := decodeRecord([]byte(line), &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("line %.100q: encoding/json %v, decodeRecord %v", line, wantErr, gotErr)
			continue
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Errorf("line %.100q:\nencoding/json %+v\ndecodeRecord  %+v", line, want, got)
		}
	}
}
