package webhook

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
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
		var got workflowJobPayload
		want, wantErr := referenceDecode(body)
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
	`{"workflow_job":{"labels":null}}`, `{"workflow_job":{"labels":["a"],"labels":null}}`, `{"workflow_job":{"runner_id":1,"runner_id":null}}`,
	`{"workflow_job":{"head_branch":"m","head_branch":null}}`, `{"workflow_job":{"created_at":"2024-01-02T03:04:05Z","created_at":null}}`,
	`{"repository":{"private":true,"private":null}}`, `{"workflow_job":{"labels":[]}}`, `{"workflow_job":{"labels":[null]}}`,
	`{"workflow_job":{"labels":[1]}}`, `{"workflow_job":{"labels":"a"}}`, `{"workflow_job":{"labels":["a",]}}`,
	`{"workflow_job":{"labels":["a","b"],"labels":[null,"c"]}}`, `{"workflow_job":{"labels":["a","b","c","d","e"],"labels":["x"],"labels":[null,null,null,null,null,null]}}`,
	`{"workflow_job":{"created_at":"2024-01-02"}}`, `{"workflow_job":{"created_at":1}}`, `{"workflow_job":{"created_at":{}}}`,
	`{"workflow_job":{"created_at":"2024-01-02T03:04:05\u005a"}}`, `{"workflow_job":{"created_at":"2024-01-02T03:04:05\u"}}`,
	`{"workflow_job":{"created_at":"2024-01-02T03:04:05Z","created_at":"x"}}`, `{"workflow_job":{"started_at":"2024-01-02T24:04:05Z"}}`,
	`{"workflow_job":{"workflow_name":null,"workflow_name":"x"}}`,
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
		var got workflowJobPayload
		want, wantErr := referenceDecode([]byte(s))
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

// referenceDecode is encoding/json's Unmarshal into the payload, with one
// difference that Go versions disagree on: a timestamp is its string with
// the escapes resolved, read by time.Time's UnmarshalText (encoding/json
// built on jsonv2, the default since Go 1.27, does this; the older one
// hands the raw string to time.Time's UnmarshalJSON, which refuses
// escapes). Timestamps go through refTime to make it the same for both.
func referenceDecode(body []byte) (workflowJobPayload, error) {
	var r struct {
		Action      string `json:"action"`
		WorkflowJob struct {
			ID           int64    `json:"id"`
			RunID        int64    `json:"run_id"`
			RunAttempt   int      `json:"run_attempt"`
			Name         string   `json:"name"`
			WorkflowName *string  `json:"workflow_name"`
			HeadBranch   *string  `json:"head_branch"`
			Conclusion   *string  `json:"conclusion"`
			Labels       []string `json:"labels"`
			RunnerID     *int64   `json:"runner_id"`
			RunnerName   *string  `json:"runner_name"`
			CreatedAt    *refTime `json:"created_at"`
			StartedAt    *refTime `json:"started_at"`
			CompletedAt  *refTime `json:"completed_at"`
		} `json:"workflow_job"`
		Repository   repository    `json:"repository"`
		Installation *installation `json:"installation"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return workflowJobPayload{}, err
	}
	var p workflowJobPayload
	p.Action, p.Repository, p.Installation = r.Action, r.Repository, r.Installation
	w, rw := &p.WorkflowJob, r.WorkflowJob
	w.ID, w.RunID, w.RunAttempt, w.Name, w.WorkflowName, w.HeadBranch = rw.ID, rw.RunID, rw.RunAttempt, rw.Name, rw.WorkflowName, rw.HeadBranch
	w.Conclusion, w.Labels, w.RunnerID, w.RunnerName = rw.Conclusion, rw.Labels, rw.RunnerID, rw.RunnerName
	w.CreatedAt, w.StartedAt, w.CompletedAt = rw.CreatedAt.time(), rw.StartedAt.time(), rw.CompletedAt.time()
	return p, nil
}

// refTime is a timestamp read as referenceDecode says.
type refTime time.Time

func (t *refTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	return (*time.Time)(t).UnmarshalText([]byte(s))
}

func (t *refTime) time() *time.Time { return (*time.Time)(t) }
