package webhook

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeWorkflowJob checks decodeWorkflowJob against encoding/json:
// for any body, both fail, or both succeed with the same payload.
func FuzzDecodeWorkflowJob(f *testing.F) {
	for _, ex := range loadExamples(f) {
		f.Add(ex.body)
	}
	for _, s := range decodeCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want, got workflowJobPayload
		wantErr := json.Unmarshal(body, &want)
		gotErr := decodeWorkflowJob(body, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("body %q: encoding/json %v, decodeWorkflowJob %v", body, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("body %q:\nencoding/json    %+v\ndecodeWorkflowJob %+v", body, want, got)
		}
	})
}

// decodeCases are the corners of encoding/json's decoding that
// decodeWorkflowJob must keep.
var decodeCases = []string{
	``, ` `, `null`, `[]`, `"x"`, `1`, `{}`, `{} x`, `{`, `{"action":"queued"`, `{"action":}`, `{"action" "x"}`, `{,}`, `{"a":1,}`,
	`{"action":"queued","workflow_job":{"id":1,"run_id":2,"run_attempt":3,"name":"n","workflow_name":"w","head_branch":"h",` +
		`"conclusion":null,"labels":["a","b"],"runner_id":5,"runner_name":"r","created_at":"2024-01-02T03:04:05Z",` +
		`"started_at":"2024-01-02T03:04:06.5+02:00","completed_at":null},"repository":{"full_name":"o/r","visibility":"private",` +
		`"private":true},"installation":{"id":9}}`,
	`{"ACTION":"queued","Workflow_Job":{"ID":1,"RUN_id":2},"REPOSITORY":{"FULL_NAME":"o/r"}}`,
	`{"action":"a","action":"b"}`, `{"action":null}`, `{"action":1}`, `{"action":true}`, `{"action":{}}`, `{"action":[]}`,
	`{"workflow_job":{"id":1},"workflow_job":{"run_id":2}}`, `{"workflow_job":null}`, `{"workflow_job":[]}`, `{"workflow_job":"x"}`,
	`{"workflow_job":{"id":"1"}}`, `{"workflow_job":{"id":1.0}}`, `{"workflow_job":{"id":1e2}}`, `{"workflow_job":{"id":-0}}`,
	`{"workflow_job":{"id":9223372036854775807}}`, `{"workflow_job":{"id":9223372036854775808}}`, `{"workflow_job":{"id":-}}`,
	`{"workflow_job":{"id":01}}`, `{"workflow_job":{"id":1.}}`, `{"workflow_job":{"id":1e}}`, `{"workflow_job":{"id":null}}`,
	`{"workflow_job":{"run_attempt":3,"run_attempt":null}}`, `{"workflow_job":{"runner_id":null}}`, `{"workflow_job":{"runner_id":"x"}}`,
	`{"workflow_job":{"labels":null}}`, `{"workflow_job":{"labels":[]}}`, `{"workflow_job":{"labels":[null]}}`,
	`{"workflow_job":{"labels":[1]}}`, `{"workflow_job":{"labels":"a"}}`, `{"workflow_job":{"labels":["a",]}}`,
	`{"workflow_job":{"labels":["a","b"],"labels":[null,"c"]}}`, `{"workflow_job":{"labels":["a","b","c","d","e"],"labels":["x"],"labels":[null,null,null,null,null,null]}}`,
	`{"workflow_job":{"created_at":"2024-01-02"}}`, `{"workflow_job":{"created_at":1}}`, `{"workflow_job":{"created_at":{}}}`,
	`{"workflow_job":{"created_at":"2024-01-02T03:04:05\u005a"}}`, `{"workflow_job":{"workflow_name":null,"workflow_name":"x"}}`,
	`{"repository":{"private":"yes"}}`, `{"repository":{"private":null}}`, `{"repository":{"private":false}}`, `{"repository":null}`,
	`{"installation":null}`, `{"installation":{"id":1},"installation":{}}`, `{"installation":{"id":1},"installation":null}`, `{"installation":5}`,
	`{"action":"\u0071ueued"}`, `{"action":"\ud83d\ude80"}`, `{"action":"\ud83d"}`, `{"action":"\ud83dx"}`, `{"action":"\ude80\ud83d"}`,
	`{"action":"\ud83d\u0041"}`, `{"action":"a\"\\\/\b\f\n\r\t"}`, `{"action":"\x"}`, `{"action":"\u12"}`, "{\"action\":\"\x01\"}",
	"{\"action\":\"\xff\xfe\"}", "{\"action\":\"\xed\xa0\x80\"}", `{"\u0061ction":"queued"}`, "{\"\u017ftatus\":1,\"acti\u212an\":\"x\"}",
	`{"x":[1,{"y":[true,false,null,"s",-1.5e+10]}],"action":"q"}`, `{"x":tru}`, `{"x":nul}`, `{"x":nfalse}`, `{"action":nul}`,
	`{"x":[1 2]}`, `{"x":{"a" 1}}`, `{"x":{"a":1 "b":2}}`, " \t\r\n{\"action\" : \"q\" } \n",
	strings.Repeat(`[`, 9998) + strings.Repeat(`]`, 9998), `{"x":` + strings.Repeat(`[`, 9999) + strings.Repeat(`]`, 9999) + `}`,
	`{"x":` + strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000) + `}`,
	`{"workflow_job":{"labels":` + strings.Repeat(`[`, 9998) + strings.Repeat(`]`, 9998) + `}}`,
}

// TestDecodeWorkflowJob runs the corner cases without fuzzing.
func TestDecodeWorkflowJob(t *testing.T) {
	t.Parallel()
	for _, s := range decodeCases {
		var want, got workflowJobPayload
		wantErr := json.Unmarshal([]byte(s), &want)
		gotErr := decodeWorkflowJob([]byte(s), &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("body %.80q: encoding/json %v, decodeWorkflowJob %v", s, wantErr, gotErr)
			continue
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Errorf("body %.80q:\nencoding/json    %+v\ndecodeWorkflowJob %+v", s, want, got)
		}
	}
}
