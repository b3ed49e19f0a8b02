package storetest

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skiffci/skiff/pkg/store/dynamostore"
)

var tableSeq atomic.Int64

// NewTable creates a fresh state table (dynamostore.CreateTable) named
// prefix-<n> in the emulator client speaks to, and returns its name: each
// test gets its own, so that tests run in parallel on one emulator.
func NewTable(t *testing.T, client *dynamodb.Client, prefix string) string {
	t.Helper()
	table := prefix + "-" + strconv.FormatInt(tableSeq.Add(1), 10)
	if err := dynamostore.CreateTable(t.Context(), client, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	return table
}
