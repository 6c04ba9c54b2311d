package collector

import (
	"regexp"
	"strconv"
)

// Source says which part of the apiserver refused a resourceVersion.
type Source string

const (
	// SourceWatchCache: the watch cache's history no longer holds the RV.
	SourceWatchCache Source = "watchcache"
	// SourceEtcd: etcd compacted the revision (the watch cache is off for
	// the resource, or the request went past it).
	SourceEtcd Source = "etcd"
	// SourceUnknown: a 410 whose message is neither form.
	SourceUnknown Source = "unknown"
)

// Refusal is what a 410 Gone says about the apiserver's history.
type Refusal struct {
	Source Source
	// Requested is the refused RV, when the message gives it.
	Requested uint64
	// Oldest is the O of "too old resource version: R (O)": the cache's
	// oldest RV − 1, the oldest RV a watch may still start from. 0 when the
	// message does not give it.
	Oldest uint64
}

var (
	// k8s.io/apiserver/pkg/storage/cacher: the history form carries O; the
	// store form does not.
	cacheTooOld = regexp.MustCompile(`^too old resource version: (0|[1-9]\d*)(?: \((0|[1-9]\d*)\))?$`)
	// k8s.io/apiserver/pkg/storage/etcd3/errors.go, for etcd's ErrCompacted.
	etcdCompacted = "The resourceVersion for the provided watch is too old."
)

// ParseRefusal reads the message of a 410 Expired status.
func ParseRefusal(msg string) Refusal {
	if msg == etcdCompacted {
		return Refusal{Source: SourceEtcd}
	}
	m := cacheTooOld.FindStringSubmatch(msg)
	if m == nil {
		return Refusal{Source: SourceUnknown}
	}
	r := Refusal{Source: SourceWatchCache}
	var err error
	if r.Requested, err = strconv.ParseUint(m[1], 10, 64); err != nil {
		return Refusal{Source: SourceUnknown}
	}
	if m[2] != "" {
		if r.Oldest, err = strconv.ParseUint(m[2], 10, 64); err != nil {
			return Refusal{Source: SourceUnknown}
		}
	}
	return r
}
