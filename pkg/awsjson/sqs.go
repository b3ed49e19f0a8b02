package awsjson

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

// SQS sends SendMessage by hand, with the method signature of
// *sqs.Client; a call with options, or whose input sets a field the hand
// encoder does not write (MessageSystemAttributes, list attribute values),
// goes through the SDK client it was built from. Like the SDK, it checks
// the MD5 of the message body that SQS answers with. Its errors are
// generic API errors with SQS's code (ErrorCode, as the SDK reads it), not
// the SDK's exception types: nothing that sends classifies them further.
// It is safe for concurrent use.
type SQS struct {
	c        *client
	sdk      *sqs.Client
	checkMD5 bool
}

// NewSQS returns an SQS over the SDK client's options: its endpoint,
// resolved now, its credentials, HTTP client and retryer.
func NewSQS(ctx context.Context, sdk *sqs.Client) (*SQS, error) {
	o := sdk.Options()
	if o.EndpointResolver != nil {
		return nil, errors.New("SQS: the deprecated EndpointResolver option is not supported; set BaseEndpoint")
	}
	ep, err := o.EndpointResolverV2.ResolveEndpoint(ctx, sqs.EndpointParameters{
		Region:       aws.String(o.Region),
		UseDualStack: aws.Bool(o.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		UseFIPS:      aws.Bool(o.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled),
		Endpoint:     o.BaseEndpoint,
	})
	if err != nil {
		return nil, fmt.Errorf("SQS: resolving the endpoint: %w", err)
	}
	cfg := clientConfig{
		serviceID: sqs.ServiceID, target: "AmazonSQS.", signingName: "sqs", region: o.Region,
		endpoint: ep.URI, http: o.HTTPClient, creds: o.Credentials, retryer: o.Retryer,
		signer: v4.NewSigner(func(so *v4.SignerOptions) {
			so.Logger, so.LogSigning = o.Logger, o.ClientLogMode.IsSigning()
		}),
		// SQS answers the JSON protocol with the Query protocol's error
		// codes (x-amzn-query-error) when asked, as the SDK asks; its
		// answers are small, so they are asked for uncompressed.
		headers:     map[string]string{"X-Amzn-Query-Mode": "true", "Accept-Encoding": "identity"},
		decodeError: sqsError,
	}
	signingFrom(&ep.Properties, &cfg)
	for k := range ep.Headers {
		cfg.headers[k] = ep.Headers.Get(k)
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return &SQS{c: c, sdk: sdk, checkMD5: !o.DisableMessageChecksumValidation}, nil
}

// SendMessage sends the message by hand when it can (see SQS).
func (q *SQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if len(optFns) > 0 || in.MessageSystemAttributes != nil {
		return q.sdk.SendMessage(ctx, in, optFns...)
	}
	for _, a := range in.MessageAttributes {
		if a.BinaryListValues != nil || a.StringListValues != nil {
			return q.sdk.SendMessage(ctx, in, optFns...)
		}
	}
	body, err := encodeSendMessage(in)
	out, err := exchange(ctx, q.c, "SendMessage", body, err, decodeSendMessage)
	if err != nil {
		return nil, err
	}
	if q.checkMD5 && out.MD5OfMessageBody != nil {
		sum := md5.Sum([]byte(*in.MessageBody))
		if got := hex.EncodeToString(sum[:]); got != *out.MD5OfMessageBody {
			return nil, q.c.opError("SendMessage", fmt.Errorf("message %s has invalid checksum, expected MD5 checksum %s, got %s",
				aws.ToString(out.MessageId), *out.MD5OfMessageBody, got))
		}
	}
	return out, nil
}

// encodeSendMessage writes the members the SDK writes for in, in its order.
func encodeSendMessage(in *sqs.SendMessageInput) ([]byte, error) {
	if in.QueueUrl == nil || in.MessageBody == nil {
		return nil, errors.New("SendMessageInput: QueueUrl and MessageBody are required")
	}
	o := object{b: make([]byte, 0, 256+len(*in.MessageBody)*11/10+len(*in.QueueUrl))}
	o.open()
	if in.DelaySeconds != 0 {
		o.key("DelaySeconds")
		o.b = strconv.AppendInt(o.b, int64(in.DelaySeconds), 10)
	}
	if in.MessageAttributes != nil {
		o.key("MessageAttributes")
		o.b = append(o.b, '{')
		first := true
		for name, a := range in.MessageAttributes {
			if !first {
				o.b = append(o.b, ',')
			}
			first = false
			o.b = appendString(o.b, name)
			o.b = append(o.b, ':')
			v := object{b: o.b}
			v.open()
			if a.BinaryValue != nil {
				v.key("BinaryValue")
				v.b = append(v.b, '"')
				v.b = base64.StdEncoding.AppendEncode(v.b, a.BinaryValue)
				v.b = append(v.b, '"')
			}
			v.str("DataType", a.DataType)
			v.str("StringValue", a.StringValue)
			v.close()
			o.b = v.b
		}
		o.b = append(o.b, '}')
	}
	o.str("MessageBody", in.MessageBody)
	o.str("MessageDeduplicationId", in.MessageDeduplicationId)
	o.str("MessageGroupId", in.MessageGroupId)
	o.str("QueueUrl", in.QueueUrl)
	o.close()
	return o.b, nil
}

// decodeSendMessage reads SendMessage's answer: by hand when it is the
// usual object of plain strings, else with encoding/json.
func decodeSendMessage(b []byte) (*sqs.SendMessageOutput, error) {
	out := &sqs.SendMessageOutput{}
	if flatStrings(b, func(k, v string) {
		switch k {
		case "MessageId":
			out.MessageId = &v
		case "MD5OfMessageBody":
			out.MD5OfMessageBody = &v
		case "MD5OfMessageAttributes":
			out.MD5OfMessageAttributes = &v
		case "MD5OfMessageSystemAttributes":
			out.MD5OfMessageSystemAttributes = &v
		case "SequenceNumber":
			out.SequenceNumber = &v
		}
	}) {
		return out, nil
	}
	var w struct {
		MessageId, MD5OfMessageBody, MD5OfMessageAttributes, MD5OfMessageSystemAttributes, SequenceNumber *string
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, &smithy.DeserializationError{Err: fmt.Errorf("decoding the answer: %w", err), Snapshot: b}
	}
	out.MessageId, out.MD5OfMessageBody, out.MD5OfMessageAttributes = w.MessageId, w.MD5OfMessageBody, w.MD5OfMessageAttributes
	out.MD5OfMessageSystemAttributes, out.SequenceNumber = w.MD5OfMessageSystemAttributes, w.SequenceNumber
	return out, nil
}

// sqsError returns a generic API error with SQS's code: the Query
// protocol's (AWS.SimpleQueueService.NonExistentQueue) when the answer
// carries one, as the SDK reads it, else the JSON protocol's.
func sqsError(code, message string, h http.Header, _ []byte) error {
	fault := smithy.FaultUnknown
	if q := h.Get("X-Amzn-Query-Error"); q != "" {
		if c, f, ok := strings.Cut(q, ";"); ok && c != "" {
			code = c
			switch f {
			case "Sender":
				fault = smithy.FaultClient
			case "Receiver":
				fault = smithy.FaultServer
			}
		}
	}
	if code == "" {
		code = "UnknownError"
	}
	return &smithy.GenericAPIError{Code: code, Message: message, Fault: fault}
}
