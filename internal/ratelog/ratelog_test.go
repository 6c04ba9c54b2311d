package ratelog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

func TestLogger(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	now := time.Unix(0, 0)
	l := New(log, 10*time.Second, func() time.Time { return now })
	err := errors.New("boom")
	for i := 0; i < 5; i++ {
		l.Error("a", err, "failed")
		now = now.Add(time.Second)
	}
	l.Error("b", err, "other") // another key is not held back
	now = now.Add(5 * time.Second)
	l.Error("a", err, "failed")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3: %q", len(lines), lines)
	}
	if !strings.Contains(lines[2], `"suppressedSinceLast"=4`) {
		t.Errorf("third line %q does not count the 4 held back", lines[2])
	}
}
