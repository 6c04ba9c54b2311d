package owned

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestMergePatch(t *testing.T) {
	for _, tc := range [][2]string{{"seq", "42"}, {"touched", `2026-12-02T10:00:00Z`}, {`we"ird`, "a\\b\n"}} {
		var got map[string]map[string]string
		if err := json.Unmarshal(MergePatch(tc[0], tc[1]), &got); err != nil {
			t.Fatalf("MergePatch(%q, %q) = %s: %v", tc[0], tc[1], MergePatch(tc[0], tc[1]), err)
		}
		if want := map[string]map[string]string{"data": {tc[0]: tc[1]}}; !reflect.DeepEqual(got, want) {
			t.Errorf("MergePatch(%q, %q) decodes to %v", tc[0], tc[1], got)
		}
	}
}

func TestParseRV(t *testing.T) {
	if rv, err := ParseRV("12345"); err != nil || rv != 12345 {
		t.Errorf("ParseRV(12345) = %d, %v", rv, err)
	}
	if _, err := ParseRV("abc"); err == nil {
		t.Error("ParseRV(abc): no error")
	}
}

func BenchmarkMergePatch(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		MergePatch("seq", "1234567")
	}
}
