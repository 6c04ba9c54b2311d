package collector

import (
	"fmt"
	"testing"
)

func TestParseRefusal(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want Refusal
	}{
		{"too old resource version: 228 (286)", Refusal{SourceWatchCache, 228, 286}},
		{"too old resource version: 1 (18446744073709551615)", Refusal{SourceWatchCache, 1, 18446744073709551615}},
		{"too old resource version: 7", Refusal{SourceWatchCache, 7, 0}},
		{"The resourceVersion for the provided watch is too old.", Refusal{Source: SourceEtcd}},
		{"too old resource version: 1 (18446744073709551616)", Refusal{Source: SourceUnknown}},
		{"too old resource version: -1 (2)", Refusal{Source: SourceUnknown}},
		{"too old resource version: 1 (2) ", Refusal{Source: SourceUnknown}},
		{"too old resource version: 01 (2)", Refusal{Source: SourceUnknown}},
		{"Too large resource version: 10, current: 5", Refusal{Source: SourceUnknown}},
		{"", Refusal{Source: SourceUnknown}},
	} {
		if got := ParseRefusal(tc.msg); got != tc.want {
			t.Errorf("ParseRefusal(%q) = %+v, want %+v", tc.msg, got, tc.want)
		}
	}
}

func FuzzParseRefusal(f *testing.F) {
	f.Add("too old resource version: 228 (286)")
	f.Add("too old resource version: 7")
	f.Add("The resourceVersion for the provided watch is too old.")
	f.Fuzz(func(t *testing.T, msg string) {
		r := ParseRefusal(msg)
		switch r.Source {
		case SourceWatchCache:
			// What was parsed prints back to the message, in one of the
			// two forms the apiserver writes with %d.
			short := fmt.Sprintf("too old resource version: %d", r.Requested)
			long := fmt.Sprintf("%s (%d)", short, r.Oldest)
			if msg != long && (msg != short || r.Oldest != 0) {
				t.Errorf("ParseRefusal(%q) = %+v, which prints as %q", msg, r, long)
			}
		case SourceEtcd:
			if msg != etcdCompacted {
				t.Errorf("ParseRefusal(%q) = etcd form", msg)
			}
		case SourceUnknown:
			if r.Requested != 0 || r.Oldest != 0 {
				t.Errorf("ParseRefusal(%q) = %+v: unknown form with numbers", msg, r)
			}
		default:
			t.Errorf("ParseRefusal(%q): source %q", msg, r.Source)
		}
	})
}

func BenchmarkParseRefusal(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ParseRefusal("too old resource version: 228 (286)")
	}
}
