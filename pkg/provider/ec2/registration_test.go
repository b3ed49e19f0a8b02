package ec2_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/provider/ec2"
	"github.com/skiffci/skiff/pkg/userdata"
)

// TestRegistrationTable writes registrations through the real SDK to
// dynalite and reads them back the way the instance does: DeleteItem with
// ReturnValues=ALL_OLD, once.
func TestRegistrationTable(t *testing.T) {
	t.Parallel()
	client := testenv.DynamoClient(t, testenv.Dynalite(t))
	table := "skiff-registrations-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := testenv.AwaitContext(t)
	defer cancel()
	if err := ec2.CreateRegistrationTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	if err := ec2.CreateRegistrationTable(ctx, client, table); err != nil {
		t.Fatalf("creating the table again: %v; want nil (it exists)", err)
	}
	w := ec2.NewRegistrationTable(client, table)
	expires := time.Date(2026, 6, 1, 12, 15, 0, 0, time.UTC)
	arn := userdata.InstanceARN("aws", "eu-west-1", "123456789012", "i-0123456789abcdef0")
	cases := []struct {
		name string
		reg  userdata.Registration
		want map[string]string // attribute → value read back; nil: the write must fail
	}{
		{"jit", userdata.Registration{InstanceARN: arn, Mode: userdata.ModeJIT, JITConfig: "eyJjYW5hcnkiOiJ5ZXMifQ==", ExpiresAt: expires},
			map[string]string{"mode": "jit", "jit_config": "eyJjYW5hcnkiOiJ5ZXMifQ==", "expires_at": strconv.FormatInt(expires.Unix(), 10)}},
		{"token", userdata.Registration{InstanceARN: arn, Mode: userdata.ModeToken, Token: "AABBCC", URL: "https://github.com/acme",
			RunnerName: "skiff-1-1", Labels: []string{"self-hosted", "linux", "x64"}, RunnerGroup: "Default", ExpiresAt: expires},
			map[string]string{"mode": "token", "token": "AABBCC", "url": "https://github.com/acme", "runner_name": "skiff-1-1",
				"labels": "self-hosted,linux,x64", "runner_group": "Default"}},
		{"a label with a comma breaks the contract", userdata.Registration{InstanceARN: arn, Mode: userdata.ModeToken, Token: "A",
			URL: "https://github.com/acme", RunnerName: "r", Labels: []string{"a,b"}, ExpiresAt: expires}, nil},
	}
	for _, tc := range cases {
		err := w.Put(context.Background(), tc.reg)
		if tc.want == nil {
			if !errors.Is(err, userdata.ErrInvalidRegistration) {
				t.Errorf("%s: err = %v, want ErrInvalidRegistration", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		out, err := client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: aws.String(table), ReturnValues: types.ReturnValueAllOld,
			Key: map[string]types.AttributeValue{userdata.AttrPK: &types.AttributeValueMemberS{Value: arn}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.want {
			var got string
			switch a := out.Attributes[k].(type) {
			case *types.AttributeValueMemberS:
				got = a.Value
			case *types.AttributeValueMemberN:
				got = a.Value
			}
			if got != v {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got, v)
			}
		}
		again, err := client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: aws.String(table), ReturnValues: types.ReturnValueAllOld,
			Key: map[string]types.AttributeValue{userdata.AttrPK: &types.AttributeValueMemberS{Value: arn}},
		})
		if err != nil || len(again.Attributes) != 0 {
			t.Errorf("%s: second read returned %v, %v", tc.name, again.Attributes, err)
		}
	}
}

func TestMain(m *testing.M) { testenv.Main(m) }
