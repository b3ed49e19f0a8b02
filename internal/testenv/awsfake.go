package testenv

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AWSTransport is an http.RoundTripper that answers in process as SQS and
// DynamoDB answer the AWS SDK for Go v2 over their JSON protocols, so that
// a benchmark can run the real SDK clients, with every middleware step they
// take per call (serialization, endpoint resolution, signing, retries,
// response checksums), without a network or an emulator. Every DynamoDB
// answer carries the X-Amz-Crc32 header the SDK validates, and SendMessage
// answers carry the MD5 of the message body the SQS client validates.
//
// Every write succeeds and every GetItem finds nothing: it models the
// common path of a delivery (a new job, a runner one state behind, an
// installation pinned rather than recorded), not DynamoDB's conditions. Latency, when
// set, is added to every call, as a network round trip would. It is safe
// for concurrent use.
type AWSTransport struct {
	// Latency is slept before each answer (0: none).
	Latency time.Duration
	// OpCount counts the calls by operation ("SendMessage", "PutItem",
	// "TransactWriteItems", ...): Take them.
	OpCount
}

// RoundTrip implements http.RoundTripper.
func (t *AWSTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("reading request body: %w", err)
	}
	_ = req.Body.Close()
	service, op, _ := strings.Cut(req.Header.Get("X-Amz-Target"), ".")
	t.Add(op)
	if t.Latency > 0 {
		timer := time.NewTimer(t.Latency)
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		}
	}
	switch {
	case service == "AmazonSQS" && op == "SendMessage":
		return sqsSendMessage(req, body)
	case strings.HasPrefix(service, "DynamoDB_"):
		switch op {
		case "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "GetItem":
			return dynamoAnswer(req, http.StatusOK, []byte("{}")), nil
		}
	}
	return dynamoAnswer(req, http.StatusBadRequest,
		[]byte(`{"__type":"com.amazon.coral.service#UnknownOperationException","message":"not answered in process: `+op+`"}`)), nil
}

func sqsSendMessage(req *http.Request, body []byte) (*http.Response, error) {
	var in struct{ MessageBody string }
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decoding SendMessage: %w", err)
	}
	sum := md5.Sum([]byte(in.MessageBody))
	out, _ := json.Marshal(map[string]string{
		"MD5OfMessageBody": hex.EncodeToString(sum[:]),
		"MessageId":        "5fea7756-0ea4-451a-a703-a558b933e274",
	})
	return answer(req, http.StatusOK, "application/x-amz-json-1.0", out, nil), nil
}

func dynamoAnswer(req *http.Request, status int, body []byte) *http.Response {
	return answer(req, status, "application/x-amz-json-1.0", body,
		map[string]string{"X-Amz-Crc32": strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)})
}

func answer(req *http.Request, status int, contentType string, body []byte, headers map[string]string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amzn-Requestid", "4b4d1c5e-0c0e-4b8e-9a51-5f0b6c6d7e8f")
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Set(k, headers[k])
	}
	return &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}
