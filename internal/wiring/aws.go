package wiring

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/aws/smithy-go/middleware"
)

// newDynamoDB is the DynamoDB client every function builds from awsCfg
// (whose HTTP client and retryer all its clients share): the SDK's, with
// its endpoint resolver's answers kept per set of parameters.
//
// The SDK resolves the endpoint on every call by evaluating DynamoDB's
// endpoint rules (account-based endpoints, FIPS, dual-stack, table ARNs);
// on the webhook's hot path that was 12 % of the CPU of a queued event
// (the evaluation and the goroutine stack it grows: 50–60 µs on the
// development machine), for an answer that depends only on parameters
// that do not change within a container.
func newDynamoDB(awsCfg aws.Config, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(awsCfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.EndpointResolverV2 = &dynamoEndpoints{next: o.EndpointResolverV2}
	}}, optFns...)...)
}

// newSQS is the SQS client the webhook builds from awsCfg: the SDK's, with
// its endpoint resolver's answers kept per set of parameters, as
// newDynamoDB keeps DynamoDB's (SQS's rules are fewer: evaluating them cost
// about 2 % of a queued event's CPU).
func newSQS(awsCfg aws.Config, optFns ...func(*sqs.Options)) *sqs.Client {
	return sqs.NewFromConfig(awsCfg, append([]func(*sqs.Options){func(o *sqs.Options) {
		o.EndpointResolverV2 = &sqsEndpoints{next: o.EndpointResolverV2}
	}}, optFns...)...)
}

// withoutUserAgent returns awsCfg whose clients send no User-Agent or
// amz-sdk-invocation-id header of the SDK's making: on the webhook's hot
// path, building the user agent string on every call was about 5 % of a
// queued event's CPU. Neither header is needed by SQS or DynamoDB; the
// retry, signing, clock-skew and recursion-detection steps stay.
func withoutUserAgent(awsCfg aws.Config) aws.Config {
	awsCfg.APIOptions = append(awsCfg.APIOptions[:len(awsCfg.APIOptions):len(awsCfg.APIOptions)], func(s *middleware.Stack) error {
		for _, id := range []string{(*awsmiddleware.RequestUserAgent)(nil).ID(), (*awsmiddleware.ClientRequestID)(nil).ID()} {
			if _, err := s.Build.Remove(id); err != nil {
				return fmt.Errorf("removing the %s step: %w", id, err)
			}
		}
		return nil
	})
	return awsCfg
}

// maxKeptEndpoints bounds an endpoint cache's memory: a container sees one
// set of parameters per table ARN it names (at most a few); past the bound
// the resolver is asked every time.
const maxKeptEndpoints = 64

// endpointCache keeps an endpoint resolver's answers per key (never its
// errors). The SDK does not modify a resolved endpoint (it copies the URL's
// parts into the request and reads the properties), so the kept one is
// shared between calls.
type endpointCache[K comparable] struct {
	mu   sync.RWMutex
	kept map[K]smithyendpoints.Endpoint
}

// resolve returns the endpoint kept for k, or asks resolve and keeps its
// answer.
func (c *endpointCache[K]) resolve(k K, resolve func() (smithyendpoints.Endpoint, error)) (smithyendpoints.Endpoint, error) {
	c.mu.RLock()
	e, ok := c.kept[k]
	c.mu.RUnlock()
	if ok {
		return e, nil
	}
	e, err := resolve()
	if err != nil {
		return e, err
	}
	c.mu.Lock()
	if c.kept == nil {
		c.kept = map[K]smithyendpoints.Endpoint{}
	}
	if len(c.kept) < maxKeptEndpoints {
		c.kept[k] = e
	}
	c.mu.Unlock()
	return e, nil
}

// dynamoEndpoints is a dynamodb.EndpointResolverV2 that asks next once per
// set of parameters.
type dynamoEndpoints struct {
	next dynamodb.EndpointResolverV2
	endpointCache[dynamoEndpointKey]
}

// dynamoEndpointKey is dynamodb.EndpointParameters by value: every field
// the rules read.
type dynamoEndpointKey struct {
	region, endpoint, accountID, accountIDMode, resourceARN, resourceARNs string
	dualStack, fips                                                       bool
}

// ResolveEndpoint implements dynamodb.EndpointResolverV2.
func (r *dynamoEndpoints) ResolveEndpoint(ctx context.Context, p dynamodb.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := dynamoEndpointKey{
		region: aws.ToString(p.Region), endpoint: aws.ToString(p.Endpoint), accountID: aws.ToString(p.AccountId),
		accountIDMode: aws.ToString(p.AccountIdEndpointMode), resourceARN: aws.ToString(p.ResourceArn),
		resourceARNs: strings.Join(p.ResourceArnList, "\x00"), dualStack: aws.ToBool(p.UseDualStack), fips: aws.ToBool(p.UseFIPS),
	}
	return r.resolve(k, func() (smithyendpoints.Endpoint, error) { return r.next.ResolveEndpoint(ctx, p) })
}

// sqsEndpoints is an sqs.EndpointResolverV2 that asks next once per set of
// parameters.
type sqsEndpoints struct {
	next sqs.EndpointResolverV2
	endpointCache[sqsEndpointKey]
}

// sqsEndpointKey is sqs.EndpointParameters by value: every field the rules
// read.
type sqsEndpointKey struct {
	region, endpoint string
	dualStack, fips  bool
}

// ResolveEndpoint implements sqs.EndpointResolverV2.
func (r *sqsEndpoints) ResolveEndpoint(ctx context.Context, p sqs.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := sqsEndpointKey{
		region: aws.ToString(p.Region), endpoint: aws.ToString(p.Endpoint),
		dualStack: aws.ToBool(p.UseDualStack), fips: aws.ToBool(p.UseFIPS),
	}
	return r.resolve(k, func() (smithyendpoints.Endpoint, error) { return r.next.ResolveEndpoint(ctx, p) })
}
