package accuracy_test

import (
	"os"
	"testing"

	"github.com/watchcache/watchcache-exporter/test/exportertest"
)

func TestMain(m *testing.M) { os.Exit(exportertest.Main(m)) }
