package awsjson

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// DynamoDB sends PutItem, UpdateItem and TransactWriteItems on one table
// by hand, with the method signatures of *dynamodb.Client, and every other
// call through the SDK client it was built from: GetItem and DeleteItem,
// calls on another table, calls with options, and inputs that set a field
// the hand encoder does not write (the legacy Expected, AttributeUpdates
// and ConditionalOperator, and ReturnConsumedCapacity or
// ReturnItemCollectionMetrics, whose answers it does not decode). It is
// safe for concurrent use.
type DynamoDB struct {
	c     *client
	sdk   *dynamodb.Client
	table string
}

// NewDynamoDB returns a DynamoDB for table over the SDK client's options:
// its endpoint, resolved now for table, its credentials, HTTP client and
// retryer. It fails when the client is configured in a way it does not
// mirror (a legacy EndpointResolver, no credentials).
func NewDynamoDB(ctx context.Context, sdk *dynamodb.Client, table string) (*DynamoDB, error) {
	o := sdk.Options()
	if o.EndpointResolver != nil {
		return nil, errors.New("DynamoDB: the deprecated EndpointResolver option is not supported; set BaseEndpoint")
	}
	if o.Credentials == nil {
		return nil, errors.New("DynamoDB: no credentials provider")
	}
	params := dynamodb.EndpointParameters{
		Region:                aws.String(o.Region),
		UseDualStack:          aws.Bool(o.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		UseFIPS:               aws.Bool(o.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled),
		Endpoint:              o.BaseEndpoint,
		AccountIdEndpointMode: aws.String(string(o.AccountIDEndpointMode)),
		ResourceArn:           aws.String(table),
	}
	if o.AccountIDEndpointMode != aws.AccountIDEndpointModeDisabled {
		creds, err := o.Credentials.Retrieve(ctx)
		if err != nil {
			return nil, fmt.Errorf("DynamoDB: retrieving credentials for the endpoint: %w", err)
		}
		if creds.AccountID != "" {
			params.AccountId = aws.String(creds.AccountID)
		} else if o.AccountIDEndpointMode == aws.AccountIDEndpointModeRequired {
			return nil, errors.New("DynamoDB: accountID is required but not set")
		}
	}
	ep, err := o.EndpointResolverV2.ResolveEndpoint(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("DynamoDB: resolving the endpoint: %w", err)
	}
	cfg := clientConfig{
		serviceID: dynamodb.ServiceID, target: "DynamoDB_20120810.", signingName: "dynamodb", region: o.Region,
		endpoint: ep.URI, http: o.HTTPClient, creds: o.Credentials, retryer: o.Retryer,
		signer: v4.NewSigner(func(so *v4.SignerOptions) {
			so.Logger, so.LogSigning = o.Logger, o.ClientLogMode.IsSigning()
		}),
		// The SDK asks DynamoDB for an uncompressed answer, whose CRC-32 it checks.
		headers:     map[string]string{"Accept-Encoding": "identity"},
		crc32:       !o.DisableValidateResponseChecksum,
		decodeError: dynamoError,
	}
	signingFrom(&ep.Properties, &cfg)
	for k := range ep.Headers {
		cfg.headers[k] = ep.Headers.Get(k)
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return &DynamoDB{c: c, sdk: sdk, table: table}, nil
}

// signingFrom takes the SigV4 signing name and region from a resolved
// endpoint's auth schemes, where it names them.
func signingFrom(p *smithy.Properties, cfg *clientConfig) {
	opts, _ := smithyauth.GetAuthOptions(p)
	for _, o := range opts {
		if o.SchemeID != "aws.auth#sigv4" {
			continue
		}
		if n, ok := smithyhttp.GetSigV4SigningName(&o.SignerProperties); ok && n != "" {
			cfg.signingName = n
		}
		if r, ok := smithyhttp.GetSigV4SigningRegion(&o.SignerProperties); ok && r != "" {
			cfg.region = r
		}
	}
}

// GetItem is the SDK client's.
func (d *DynamoDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return d.sdk.GetItem(ctx, in, optFns...)
}

// DeleteItem is the SDK client's.
func (d *DynamoDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return d.sdk.DeleteItem(ctx, in, optFns...)
}

// PutItem sends the request by hand when it can (see DynamoDB).
func (d *DynamoDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if !d.mine(in.TableName, len(optFns)) || in.ConditionalOperator != "" || in.Expected != nil ||
		in.ReturnConsumedCapacity != "" || in.ReturnItemCollectionMetrics != "" {
		return d.sdk.PutItem(ctx, in, optFns...)
	}
	body, err := encodePutItem(in)
	attrs, err := exchange(ctx, d.c, "PutItem", body, err, decodeAttributes)
	if err != nil {
		return nil, err
	}
	return &dynamodb.PutItemOutput{Attributes: attrs}, nil
}

// UpdateItem sends the request by hand when it can (see DynamoDB).
func (d *DynamoDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !d.mine(in.TableName, len(optFns)) || in.ConditionalOperator != "" || in.Expected != nil || in.AttributeUpdates != nil ||
		in.ReturnConsumedCapacity != "" || in.ReturnItemCollectionMetrics != "" {
		return d.sdk.UpdateItem(ctx, in, optFns...)
	}
	body, err := encodeUpdateItem(in)
	attrs, err := exchange(ctx, d.c, "UpdateItem", body, err, decodeAttributes)
	if err != nil {
		return nil, err
	}
	return &dynamodb.UpdateItemOutput{Attributes: attrs}, nil
}

// TransactWriteItems sends the request by hand when it can (see DynamoDB).
// Like the SDK, it gives a request without a ClientRequestToken a random
// one, so that its retries are idempotent: DynamoDB answers a repeated
// token with the first call's outcome instead of applying it again.
func (d *DynamoDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	mine := len(optFns) == 0 && in.ReturnConsumedCapacity == "" && in.ReturnItemCollectionMetrics == "" && len(in.TransactItems) > 0
	for _, it := range in.TransactItems {
		var table *string
		switch {
		case it.ConditionCheck != nil:
			table = it.ConditionCheck.TableName
		case it.Delete != nil:
			table = it.Delete.TableName
		case it.Put != nil:
			table = it.Put.TableName
		case it.Update != nil:
			table = it.Update.TableName
		}
		mine = mine && d.mine(table, 0)
	}
	if !mine {
		return d.sdk.TransactWriteItems(ctx, in, optFns...)
	}
	token := in.ClientRequestToken
	if token == nil {
		t, err := newToken()
		if err != nil {
			return nil, d.c.opError("TransactWriteItems", err)
		}
		token = &t
	}
	body, err := encodeTransactWriteItems(in, token)
	if err != nil {
		return nil, d.c.opError("TransactWriteItems", err)
	}
	if _, err := d.c.do(ctx, "TransactWriteItems", body); err != nil {
		return nil, err
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// mine reports whether a call goes by hand: on the table the endpoint was
// resolved for, without per-call options.
func (d *DynamoDB) mine(table *string, opts int) bool {
	return opts == 0 && table != nil && *table == d.table
}

// newToken returns a random (version 4) UUID, as the SDK's idempotency
// tokens are.
func newToken() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", fmt.Errorf("generating a client request token: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	b := make([]byte, 0, 36)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&0xF])
	}
	return string(b), nil
}

// The encoders write members in the order the SDK's serializer does
// (alphabetical), and write exactly the members the SDK writes for the
// same input: set pointers, non-empty enums, non-nil maps.

func encodePutItem(in *dynamodb.PutItemInput) ([]byte, error) {
	if in.Item == nil {
		return nil, errors.New("1 validation error(s) found.\n- missing required field, PutItemInput.Item.")
	}
	o := object{b: make([]byte, 0, 256+64*len(in.Item))}
	o.open()
	o.str("ConditionExpression", in.ConditionExpression)
	o.names("ExpressionAttributeNames", in.ExpressionAttributeNames)
	if err := o.values("ExpressionAttributeValues", in.ExpressionAttributeValues); err != nil {
		return nil, err
	}
	if err := o.values("Item", in.Item); err != nil {
		return nil, err
	}
	o.enum("ReturnValues", string(in.ReturnValues))
	o.enum("ReturnValuesOnConditionCheckFailure", string(in.ReturnValuesOnConditionCheckFailure))
	o.str("TableName", in.TableName)
	o.close()
	return o.b, nil
}

func encodeUpdateItem(in *dynamodb.UpdateItemInput) ([]byte, error) {
	if in.Key == nil {
		return nil, errors.New("1 validation error(s) found.\n- missing required field, UpdateItemInput.Key.")
	}
	o := object{b: make([]byte, 0, 512+64*len(in.ExpressionAttributeValues))}
	o.open()
	if err := o.update(in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, in.Key,
		in.ReturnValues, in.ReturnValuesOnConditionCheckFailure, in.TableName, in.UpdateExpression); err != nil {
		return nil, err
	}
	o.close()
	return o.b, nil
}

// update writes the members of an UpdateItem request, or of a
// transaction's Update, which has no ReturnValues.
func (o *object) update(cond *string, names map[string]string, values, key map[string]types.AttributeValue,
	ret types.ReturnValue, retOnFailure types.ReturnValuesOnConditionCheckFailure, table, update *string) error {
	o.str("ConditionExpression", cond)
	o.names("ExpressionAttributeNames", names)
	if err := o.values("ExpressionAttributeValues", values); err != nil {
		return err
	}
	if err := o.values("Key", key); err != nil {
		return err
	}
	o.enum("ReturnValues", string(ret))
	o.enum("ReturnValuesOnConditionCheckFailure", string(retOnFailure))
	o.str("TableName", table)
	o.str("UpdateExpression", update)
	return nil
}

func encodeTransactWriteItems(in *dynamodb.TransactWriteItemsInput, token *string) ([]byte, error) {
	o := object{b: make([]byte, 0, 1024*len(in.TransactItems))}
	o.open()
	o.str("ClientRequestToken", token)
	o.key("TransactItems")
	o.b = append(o.b, '[')
	for i, it := range in.TransactItems {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		item := object{b: o.b}
		item.open()
		var err error
		if c := it.ConditionCheck; c != nil {
			err = item.member("ConditionCheck", func(m *object) error {
				return m.update(c.ConditionExpression, c.ExpressionAttributeNames, c.ExpressionAttributeValues, c.Key,
					"", c.ReturnValuesOnConditionCheckFailure, c.TableName, nil)
			})
		}
		if c := it.Delete; c != nil && err == nil {
			err = item.member("Delete", func(m *object) error {
				return m.update(c.ConditionExpression, c.ExpressionAttributeNames, c.ExpressionAttributeValues, c.Key,
					"", c.ReturnValuesOnConditionCheckFailure, c.TableName, nil)
			})
		}
		if c := it.Put; c != nil && err == nil {
			err = item.member("Put", func(m *object) error {
				m.str("ConditionExpression", c.ConditionExpression)
				m.names("ExpressionAttributeNames", c.ExpressionAttributeNames)
				if err := m.values("ExpressionAttributeValues", c.ExpressionAttributeValues); err != nil {
					return err
				}
				if err := m.values("Item", c.Item); err != nil {
					return err
				}
				m.enum("ReturnValuesOnConditionCheckFailure", string(c.ReturnValuesOnConditionCheckFailure))
				m.str("TableName", c.TableName)
				return nil
			})
		}
		if c := it.Update; c != nil && err == nil {
			err = item.member("Update", func(m *object) error {
				return m.update(c.ConditionExpression, c.ExpressionAttributeNames, c.ExpressionAttributeValues, c.Key,
					"", c.ReturnValuesOnConditionCheckFailure, c.TableName, c.UpdateExpression)
			})
		}
		if err != nil {
			return nil, err
		}
		item.close()
		o.b = item.b
	}
	o.b = append(o.b, ']')
	o.close()
	return o.b, nil
}

// member writes a member whose value is an object written by body.
func (o *object) member(name string, body func(*object) error) error {
	o.key(name)
	m := object{b: o.b}
	m.open()
	err := body(&m)
	m.close()
	o.b = m.b
	return err
}

// values writes a map of attribute values when m is not nil.
func (o *object) values(name string, m map[string]types.AttributeValue) error {
	if m == nil {
		return nil
	}
	o.key(name)
	var err error
	o.b, err = appendValueMap(o.b, m)
	return err
}

func appendValueMap(b []byte, m map[string]types.AttributeValue) ([]byte, error) {
	b = append(b, '{')
	first := true
	for k, v := range m {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, v); err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
	}
	return append(b, '}'), nil
}

// appendValue writes one attribute value: an object with its one type
// member, as DynamoDB's wire format has it.
func appendValue(b []byte, v types.AttributeValue) ([]byte, error) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		b = append(b, `{"S":`...)
		b = appendString(b, v.Value)
	case *types.AttributeValueMemberN:
		b = append(b, `{"N":`...)
		b = appendString(b, v.Value)
	case *types.AttributeValueMemberB:
		b = append(b, `{"B":"`...)
		b = base64.StdEncoding.AppendEncode(b, v.Value)
		b = append(b, '"')
	case *types.AttributeValueMemberBOOL:
		b = append(b, `{"BOOL":`...)
		b = appendBool(b, v.Value)
	case *types.AttributeValueMemberNULL:
		b = append(b, `{"NULL":`...)
		b = appendBool(b, v.Value)
	case *types.AttributeValueMemberL:
		b = append(b, `{"L":[`...)
		for i, e := range v.Value {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	case *types.AttributeValueMemberM:
		b = append(b, `{"M":`...)
		var err error
		if b, err = appendValueMap(b, v.Value); err != nil {
			return nil, err
		}
	case *types.AttributeValueMemberSS:
		b = append(b, `{"SS":`...)
		b = appendStrings(b, v.Value)
	case *types.AttributeValueMemberNS:
		b = append(b, `{"NS":`...)
		b = appendStrings(b, v.Value)
	case *types.AttributeValueMemberBS:
		b = append(b, `{"BS":[`...)
		for i, e := range v.Value {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, e)
			b = append(b, '"')
		}
		b = append(b, ']')
	default:
		return nil, fmt.Errorf("attribute value of type %T cannot be written", v)
	}
	return append(b, '}'), nil
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func appendStrings(b []byte, l []string) []byte {
	b = append(b, '[')
	for i, s := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// wireValue is an attribute value as DynamoDB answers it. Answers that
// carry items (ReturnValues, an exception's Item) are off the hot path, so
// encoding/json reads them.
type wireValue struct {
	S    *string              `json:"S"`
	N    *string              `json:"N"`
	B    []byte               `json:"B"`
	BOOL *bool                `json:"BOOL"`
	NULL *bool                `json:"NULL"`
	L    []wireValue          `json:"L"`
	M    map[string]wireValue `json:"M"`
	SS   []string             `json:"SS"`
	NS   []string             `json:"NS"`
	BS   [][]byte             `json:"BS"`
}

func (w wireValue) value() (types.AttributeValue, error) {
	switch {
	case w.S != nil:
		return &types.AttributeValueMemberS{Value: *w.S}, nil
	case w.N != nil:
		return &types.AttributeValueMemberN{Value: *w.N}, nil
	case w.B != nil:
		return &types.AttributeValueMemberB{Value: w.B}, nil
	case w.BOOL != nil:
		return &types.AttributeValueMemberBOOL{Value: *w.BOOL}, nil
	case w.NULL != nil:
		return &types.AttributeValueMemberNULL{Value: *w.NULL}, nil
	case w.L != nil:
		l := make([]types.AttributeValue, len(w.L))
		for i, e := range w.L {
			v, err := e.value()
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return &types.AttributeValueMemberL{Value: l}, nil
	case w.M != nil:
		m, err := wireMap(w.M)
		if err != nil {
			return nil, err
		}
		return &types.AttributeValueMemberM{Value: m}, nil
	case w.SS != nil:
		return &types.AttributeValueMemberSS{Value: w.SS}, nil
	case w.NS != nil:
		return &types.AttributeValueMemberNS{Value: w.NS}, nil
	case w.BS != nil:
		return &types.AttributeValueMemberBS{Value: w.BS}, nil
	}
	return nil, errors.New("attribute value of no known type")
}

func wireMap(m map[string]wireValue) (map[string]types.AttributeValue, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]types.AttributeValue, len(m))
	for k, w := range m {
		v, err := w.value()
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// decodeAttributes reads the Attributes of a PutItem or UpdateItem answer:
// none when the answer is the empty object, the hot path's answer.
func decodeAttributes(body []byte) (map[string]types.AttributeValue, error) {
	if string(body) == "{}" {
		return nil, nil
	}
	var out struct {
		Attributes map[string]wireValue `json:"Attributes"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, &smithy.DeserializationError{Err: fmt.Errorf("decoding the answer: %w", err), Snapshot: body}
	}
	m, err := wireMap(out.Attributes)
	if err != nil {
		return nil, &smithy.DeserializationError{Err: err, Snapshot: body}
	}
	return m, nil
}

// dynamoError returns the SDK's exception type for the errors skiff
// classifies (conditions, transactions, throttling) and a generic API
// error for the others; both answer ErrorCode as the SDK's do.
func dynamoError(code, message string, _ http.Header, body []byte) error {
	msg := &message
	switch code {
	case "ConditionalCheckFailedException":
		var e struct {
			Item map[string]wireValue `json:"Item"`
		}
		_ = json.Unmarshal(body, &e)
		item, _ := wireMap(e.Item)
		return &types.ConditionalCheckFailedException{Message: msg, Item: item}
	case "TransactionCanceledException":
		var e struct {
			CancellationReasons []struct {
				Code    *string              `json:"Code"`
				Message *string              `json:"Message"`
				Item    map[string]wireValue `json:"Item"`
			} `json:"CancellationReasons"`
		}
		_ = json.Unmarshal(body, &e)
		ex := &types.TransactionCanceledException{Message: msg}
		for _, r := range e.CancellationReasons {
			item, _ := wireMap(r.Item)
			ex.CancellationReasons = append(ex.CancellationReasons, types.CancellationReason{Code: r.Code, Message: r.Message, Item: item})
		}
		return ex
	case "TransactionConflictException":
		return &types.TransactionConflictException{Message: msg}
	case "TransactionInProgressException":
		return &types.TransactionInProgressException{Message: msg}
	case "IdempotentParameterMismatchException":
		return &types.IdempotentParameterMismatchException{Message: msg}
	case "ProvisionedThroughputExceededException":
		return &types.ProvisionedThroughputExceededException{Message: msg}
	case "RequestLimitExceeded":
		return &types.RequestLimitExceeded{Message: msg}
	case "ThrottlingException":
		return &types.ThrottlingException{Message: msg}
	case "ResourceNotFoundException":
		return &types.ResourceNotFoundException{Message: msg}
	case "InternalServerError":
		return &types.InternalServerError{Message: msg}
	case "ItemCollectionSizeLimitExceededException":
		return &types.ItemCollectionSizeLimitExceededException{Message: msg}
	}
	fault := smithy.FaultUnknown
	if code == "" {
		code = "UnknownError"
	}
	return &smithy.GenericAPIError{Code: code, Message: message, Fault: fault}
}
