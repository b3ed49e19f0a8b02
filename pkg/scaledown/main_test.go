package scaledown_test

import (
	"testing"

	"github.com/skiffci/skiff/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
