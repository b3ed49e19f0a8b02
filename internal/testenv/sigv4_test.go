package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// TestVerifySigV4KnownAnswer checks the verifier against the example AWS
// publishes in its Signature Version 4 documentation (IAM ListUsers,
// signed 2015-08-30T12:36:00Z with the documentation's example key).
func TestVerifySigV4KnownAnswer(t *testing.T) {
	t.Parallel()
	want := SigV4Want{
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
		Region: "us-east-1", Service: "iam", Now: time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC),
	}
	req := func() *http.Request {
		r, err := http.NewRequest(http.MethodGet, "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		r.Header.Set("X-Amz-Date", "20150830T123600Z")
		r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "+
			"SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7")
		return r
	}
	if err := VerifySigV4(req(), nil, want); err != nil {
		t.Fatalf("the published example does not verify: %v", err)
	}
	tampered := req()
	tampered.URL.RawQuery = "Action=ListUsers&Version=2010-05-09"
	if err := VerifySigV4(tampered, nil, want); err == nil {
		t.Error("a changed query verifies")
	}
	if err := VerifySigV4(req(), []byte("a body"), want); err == nil {
		t.Error("a changed body verifies")
	}
}

// TestVerifySigV4Refuses checks that the verifier accepts a JSON request
// signed by the SDK's signer, and refuses the mistakes a hand-built
// request could make.
func TestVerifySigV4Refuses(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	want := SigV4Want{AccessKeyID: TestAccessKeyID, SecretAccessKey: TestSecretAccessKey, Region: TestRegion, Service: "dynamodb", Now: now}
	body := []byte(`{"TableName":"t"}`)
	creds := aws.Credentials{AccessKeyID: TestAccessKeyID, SecretAccessKey: TestSecretAccessKey, SessionToken: "token"}
	signed := func(mutate func(r *http.Request) (hash, service, region string)) *http.Request {
		r, err := http.NewRequest(http.MethodPost, "https://dynamodb.us-east-1.amazonaws.com/", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/x-amz-json-1.0")
		r.Header.Set("X-Amz-Target", "DynamoDB_20120810.PutItem")
		sum := sha256.Sum256(body)
		hash, service, region := hex.EncodeToString(sum[:]), "dynamodb", TestRegion
		if mutate != nil {
			if h, s, rg := mutate(r); h != "" {
				hash, service, region = h, s, rg
			}
		}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, r, hash, service, region, now); err != nil {
			t.Fatal(err)
		}
		r.Host = r.URL.Host
		return r
	}
	if err := VerifySigV4(signed(nil), body, want); err != nil {
		t.Fatalf("a request the SDK signed does not verify: %v", err)
	}
	cases := []struct {
		name string
		r    *http.Request
		body []byte
		err  string
	}{
		{"header added after signing", func() *http.Request {
			r := signed(nil)
			r.Header.Set("X-Amz-Target", "DynamoDB_20120810.DeleteTable")
			return r
		}(), body, "signature"},
		{"unsigned header", func() *http.Request {
			r := signed(func(r *http.Request) (string, string, string) { r.Header.Del("X-Amz-Target"); return "", "", "" })
			r.Header.Set("X-Amz-Target", "DynamoDB_20120810.PutItem")
			return r
		}(), body, "not signed"},
		{"another body", signed(nil), []byte(`{"TableName":"u"}`), "signature"},
		{"payload hash of another body", signed(func(*http.Request) (string, string, string) {
			s := sha256.Sum256([]byte("{}"))
			return hex.EncodeToString(s[:]), "dynamodb", TestRegion
		}), body, "signature"},
		{"another region", signed(func(*http.Request) (string, string, string) {
			s := sha256.Sum256(body)
			return hex.EncodeToString(s[:]), "dynamodb", "eu-west-1"
		}), body, "scope"},
		{"another service", signed(func(*http.Request) (string, string, string) {
			s := sha256.Sum256(body)
			return hex.EncodeToString(s[:]), "sqs", TestRegion
		}), body, "scope"},
	}
	for _, tc := range cases {
		err := VerifySigV4(tc.r, tc.body, want)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: VerifySigV4 = %v, want an error about %s", tc.name, err, tc.err)
		}
	}
	late := want
	late.Now = now.Add(time.Hour)
	if err := VerifySigV4(signed(nil), body, late); err == nil {
		t.Error("a signature an hour old verifies")
	}
}

func TestSigV4Checks(t *testing.T) {
	t.Parallel()
	want := SigV4Want{AccessKeyID: "AKID", Region: "us-east-1", Service: "sqs"}
	auth := func(credential, signed string) sigV4Auth {
		a, err := parseAuthorization("AWS4-HMAC-SHA256 Credential=" + credential + ", SignedHeaders=" + signed + ", Signature=00")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	const cred, date = "AKID/20260601/us-east-1/sqs/aws4_request", "20260601T120000Z"
	sent := http.Header{"X-Amz-Date": {date}, "Content-Type": {"application/json"}, "User-Agent": {"sdk"}}
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		check func() error
		err   string // "" when it passes
	}{
		{"scope matches", func() error { return auth(cred, "host").checkScope(date, want) }, ""},
		{"another key", func() error {
			return auth("AKOTHER/20260601/us-east-1/sqs/aws4_request", "host").checkScope(date, want)
		}, "signed with key"},
		{"another day", func() error { return auth("AKID/20260602/us-east-1/sqs/aws4_request", "host").checkScope(date, want) }, "scope day"},
		{"another region", func() error { return auth("AKID/20260601/eu-west-1/sqs/aws4_request", "host").checkScope(date, want) }, "credential scope"},
		{"another terminator", func() error { return auth("AKID/20260601/us-east-1/sqs/aws5_request", "host").checkScope(date, want) }, "credential scope"},
		{"headers signed", func() error { return auth(cred, "content-type;host;x-amz-date").checkSignedHeaders(sent) }, ""},
		{"unsorted", func() error { return auth(cred, "host;content-type;x-amz-date").checkSignedHeaders(sent) }, "not sorted"},
		{"host unsigned", func() error { return auth(cred, "content-type;x-amz-date").checkSignedHeaders(sent) }, "host is not signed"},
		{"date unsigned", func() error { return auth(cred, "content-type;host").checkSignedHeaders(sent) }, "x-amz-date is not signed"},
		{"sent header unsigned", func() error { return auth(cred, "host;x-amz-date").checkSignedHeaders(sent) }, "Content-Type is sent but not signed"},
		{"signed now", func() error { return checkSignedAt(date, now) }, ""},
		{"15 minutes late", func() error { return checkSignedAt(date, now.Add(15*time.Minute)) }, ""},
		{"16 minutes late", func() error { return checkSignedAt(date, now.Add(16*time.Minute)) }, "away from now"},
		{"16 minutes early", func() error { return checkSignedAt(date, now.Add(-16*time.Minute)) }, "away from now"},
		{"malformed date", func() error { return checkSignedAt("2026-06-01", now) }, "X-Amz-Date"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.check()
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("error = %v, want %q", err, tt.err)
			}
		})
	}
}
