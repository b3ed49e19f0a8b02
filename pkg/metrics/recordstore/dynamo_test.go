package recordstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/skiffci/skiff/internal/testenv"
	"github.com/skiffci/skiff/pkg/metrics"
	"github.com/skiffci/skiff/pkg/metrics/recordstest"
	"github.com/skiffci/skiff/pkg/metrics/recordstore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestDynamoConformance(t *testing.T) {
	t.Parallel()
	recordstest.Run(t, func(t *testing.T) metrics.Records {
		c, table := testenv.DynaliteTable(t, "skiff-records")
		return recordstore.New(c, table, recordstore.WithClock(func() time.Time { return recordstest.Now }))
	})
}

// TestDynamoItem pins the item layout: key, TTL and the filter attributes.
func TestDynamoItem(t *testing.T) {
	t.Parallel()
	c, table := testenv.DynaliteTable(t, "skiff-records")
	s := recordstore.New(c, table, recordstore.WithRetention(24*time.Hour), recordstore.WithClock(func() time.Time { return recordstest.Now }))
	r := recordstest.Record(77, 2, recordstest.Now)
	if err := s.Put(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "RECORD#77#2"}, "sk": &types.AttributeValueMemberS{Value: "RECORD"}}})
	if err != nil || out.Item == nil {
		t.Fatalf("GetItem: %v, %v", out, err)
	}
	want := map[string]string{"repository": "acme/api", "pool": "standard", "instance_type": "c7i.large", "workflow": "ci",
		"ended_at": "2026-11-02T12:00:00.000000000Z"}
	for k, v := range want {
		if got, _ := out.Item[k].(*types.AttributeValueMemberS); got == nil || got.Value != v {
			t.Errorf("%s = %v, want %q", k, out.Item[k], v)
		}
	}
	exp, _ := out.Item["expires_at"].(*types.AttributeValueMemberN)
	if exp == nil || exp.Value != strconv.FormatInt(recordstest.Now.Add(24*time.Hour).Unix()+1, 10) {
		t.Errorf("expires_at = %v", out.Item["expires_at"])
	}
	// Past its retention the record is gone for List, and its key is free.
	later := recordstore.New(c, table, recordstore.WithClock(func() time.Time { return recordstest.Now.Add(48 * time.Hour) }))
	for r, err := range later.List(t.Context(), metrics.Filter{}) {
		t.Errorf("an expired record was listed: %+v, %v", r.Key(), err)
	}
	if err := later.Put(t.Context(), r); err != nil {
		t.Errorf("Put over an expired record: %v", err)
	}
}
