package ec2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/ctxsleep"
	"github.com/skiffci/skiff/pkg/userdata"
)

// Registrations delivers runner registrations to their instances: the EC2
// provider's half of the registration contract (package userdata has the
// instance's half). Put returns nil only when the item is durably written.
type Registrations interface {
	Put(ctx context.Context, r userdata.Registration) error
}

// RegistrationAPI is the part of the DynamoDB client RegistrationTable
// calls; *dynamodb.Client implements it.
type RegistrationAPI interface {
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

var _ RegistrationAPI = (*dynamodb.Client)(nil)

// RegistrationTable writes the registration contract of pkg/userdata: one
// item per instance, keyed by its ARN, in a table of its own (encrypted with
// a KMS key, TTL on expires_at), which the instance reads and deletes in one
// DeleteItem. See docs/runner-boot.md for the reader and the threat model.
type RegistrationTable struct {
	api   RegistrationAPI
	table string
}

var _ Registrations = (*RegistrationTable)(nil)

// RegistrationTableAPI is the part of the DynamoDB client that
// CreateRegistrationTable calls; *dynamodb.Client implements it.
type RegistrationTableAPI interface {
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	dynamodb.DescribeTableAPIClient
}

var _ RegistrationTableAPI = (*dynamodb.Client)(nil)

// createTableWait bounds CreateRegistrationTable's wait when its context
// has no deadline: DynamoDB takes seconds, emulators milliseconds.
const createTableWait = 2 * time.Minute

// CreateRegistrationTable creates a registration table as the stack makes
// it — one string partition key, userdata.AttrPK, billed per request — and
// waits until it is active, as long as ctx allows. A table that already
// exists is not an error. It enables neither TTL nor the KMS key: the
// stack does (emulators lack them), and the instance treats an expired
// item as absent either way. For the tests, the load test and emulators.
func CreateRegistrationTable(ctx context.Context, api RegistrationTableAPI, table string) error {
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(userdata.AttrPK), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(userdata.AttrPK), KeyType: ddbtypes.KeyTypeHash}},
	})
	var inUse *ddbtypes.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("creating registration table %s: %w", table, err)
	}
	// Emulators turn a table ACTIVE asynchronously too.
	w := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay, o.MaxDelay = 10*time.Millisecond, time.Second })
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, ctxsleep.Bound(ctx, createTableWait)); err != nil {
		return fmt.Errorf("waiting for registration table %s: %w", table, err)
	}
	return nil
}

// NewRegistrationTable returns a writer for the table.
func NewRegistrationTable(api RegistrationAPI, table string) *RegistrationTable {
	return &RegistrationTable{api: api, table: table}
}

// Put validates r against the contract and writes it, replacing an item of
// the same instance. Errors never carry the secret.
func (t *RegistrationTable) Put(ctx context.Context, r userdata.Registration) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("writing registration of %s: %w", r.InstanceARN, err)
	}
	item := map[string]ddbtypes.AttributeValue{}
	for name, tv := range r.Attributes() {
		switch tv[0] {
		case "N":
			item[name] = &ddbtypes.AttributeValueMemberN{Value: tv[1]}
		default:
			item[name] = &ddbtypes.AttributeValueMemberS{Value: tv[1]}
		}
	}
	if _, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(t.table), Item: item}); err != nil {
		return fmt.Errorf("writing registration of %s: %w", r.InstanceARN, err)
	}
	return nil
}
