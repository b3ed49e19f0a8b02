package webhook

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzHandler throws arbitrary events, bodies and signatures at the whole
// handler, through the Function URL entry point. With a working queue and
// store it must never panic and never answer 5xx: bad input is the
// sender's fault, answered 4xx, or ignored (2xx).
func FuzzHandler(f *testing.F) {
	for _, ex := range loadExamples(f) {
		f.Add(ex.event, ex.body, true, false)
	}
	f.Add("workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":["gpu"]},"repository":{"full_name":"o/r"}}`), true, true)
	f.Add("workflow_run", []byte(`{"action":"requested","workflow_run":{"id":1,"event":"push"},"repository":{"full_name":"o/r"}}`), true, false)
	f.Add("ping", []byte(`{}`), false, false)
	f.Add("workflow_job", []byte(`{"action":1}`), true, false)
	f.Add("", []byte(nil), false, true)
	// Hostile names, ids and label counts (TestHostileInput has the full set).
	f.Add("workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":["self-hosted"]},"repository":{"full_name":"$(id)/`+"`id`"+`","visibility":"public"},"installation":{"id":-1}}`), true, false)
	f.Add("workflow_job", []byte(`{"action":"queued","workflow_job":{"id":9007199254740993,"run_id":2,"run_attempt":-1},"repository":{"full_name":"a--b/..","private":false}}`), true, false)
	f.Add("workflow_job", []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":[`+strings.Repeat(`"l",`, 101)+`"l"]},"repository":{"full_name":"o/r
","private":true}}`), true, false)
	f.Add("workflow_run", []byte(`{"action":"requested","workflow_run":{"id":1,"event":"pull_request","head_repository":{"full_name":"x/"y"},"triggering_actor":{"login":"a"}},"repository":{"full_name":"o/r"}}`), true, false)
	f.Add("workflow_run", []byte(`{"action":"requested","workflow_run":{"id":1,"run_attempt":100000,"event":"push","head_repository":null},"repository":{"full_name":"o/.\\"}}`), true, false)

	hs := newHarness(f, nil)
	f.Fuzz(func(t *testing.T, event string, body []byte, sign, b64 bool) {
		headers := map[string]string{"x-github-event": event, "x-github-delivery": "fuzz"}
		if sign {
			headers["x-hub-signature-256"] = Sign(hs.secret, body)
		}
		text := string(body)
		if b64 {
			text = base64.StdEncoding.EncodeToString(body)
		}
		resp := hs.h.HandleEncoded(context.Background(), "POST", headers, text, b64)
		switch resp.Status {
		case 200, 202, 400, 401, 403, 413:
		default:
			t.Fatalf("status %d for event %q body %q", resp.Status, event, body)
		}
		if !sign && resp.Status < 400 {
			t.Fatalf("unsigned delivery answered %d", resp.Status)
		}
	})
}
