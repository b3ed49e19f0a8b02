package queue

import (
	"encoding/json"
	"fmt"
	"strings"
)

// MaxMessageBytes bounds the encoded body of one message. SQS accepts 256 KiB
// for body and attributes together; a real job encodes to well under 1 KiB,
// so a body past 64 KiB means a payload gone wrong (thousands of labels). It
// is refused as invalid, never truncated, and leaves SQS's limit far away.
const MaxMessageBytes = 64 << 10

// EncodeMessage returns the message body of a valid job: its JSON, with
// every character SQS accepts in a body (U+FFFE and U+FFFF, which SQS
// refuses, are written as JSON escapes). It returns ErrInvalidJob for a job
// that fails Validate or encodes past MaxMessageBytes.
func EncodeMessage(job Job) (string, error) {
	if err := job.Validate(); err != nil {
		return "", invalid(err)
	}
	b, err := json.Marshal(job)
	if err != nil {
		return "", invalid(fmt.Errorf("encoding job: %w", err))
	}
	// encoding/json already escapes control characters and replaces invalid
	// UTF-8; the two noncharacters it leaves can occur only inside strings.
	body := bodyEscaper.Replace(string(b))
	if len(body) > MaxMessageBytes {
		return "", invalid(fmt.Errorf("message body is %d bytes, more than %d", len(body), MaxMessageBytes))
	}
	return body, nil
}

// DecodeMessage parses a message body written by EncodeMessage and validates
// the job. It returns ErrInvalidJob for a body that is not a valid job (no
// redelivery can fix it: dead-letter it). Unknown fields are ignored, so a
// newer sender can add fields during a rolling deploy.
func DecodeMessage(body string) (Job, error) {
	var j Job
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return Job{}, invalid(fmt.Errorf("decoding job: %w", err))
	}
	if err := j.Validate(); err != nil {
		return Job{}, invalid(err)
	}
	return j, nil
}

var bodyEscaper = strings.NewReplacer("\uFFFE", `\ufffe`, "\uFFFF", `\uffff`)
