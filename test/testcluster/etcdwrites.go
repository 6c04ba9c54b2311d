package testcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// EtcdWrites counts, by resource, the writes of the main etcd with a
// revision in (from, to]: what an RV distance between from and to is made
// of. It replays etcd's own history through its JSON gateway (a watch from
// from+1), so both revisions must be newer than etcd's last compaction and
// to must have been written.
//
// A resource is named by its key as the apiserver stores it: "configmaps",
// "leases", "apiregistration.k8s.io/apiservices"; keys outside /registry/
// (the compactor's compact_rev_key) count under their own name.
func (c *Cluster) EtcdWrites(ctx context.Context, from, to uint64) (map[string]int, error) {
	if to <= from {
		return map[string]int{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	all := base64.StdEncoding.EncodeToString([]byte{0}) // key "\x00" to range_end "\x00": every key
	body, err := json.Marshal(map[string]any{"create_request": map[string]any{
		"key": all, "range_end": all, "start_revision": from + 1,
	}})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.etcdURL+"/v3/watch", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("etcd watch from revision %d: %w", from+1, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd watch from revision %d: %s", from+1, resp.Status)
	}
	revisions := map[int64]string{} // a transaction may write several keys under one revision
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Result struct {
				CompactRevision int64  `json:"compact_revision,string"`
				Canceled        bool   `json:"canceled"`
				CancelReason    string `json:"cancel_reason"`
				Events          []struct {
					KV struct {
						Key         []byte `json:"key"`
						ModRevision int64  `json:"mod_revision,string"`
					} `json:"kv"`
				} `json:"events"`
			} `json:"result"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := dec.Decode(&msg); err != nil {
			return nil, fmt.Errorf("etcd watch from revision %d, %d of its revisions read: %w", from+1, len(revisions), err)
		}
		r := msg.Result
		switch {
		case msg.Error != nil:
			return nil, fmt.Errorf("etcd watch from revision %d: %s", from+1, msg.Error.Message)
		case r.CompactRevision != 0:
			return nil, fmt.Errorf("etcd watch from revision %d: compacted to %d", from+1, r.CompactRevision)
		case r.Canceled:
			return nil, fmt.Errorf("etcd watch from revision %d canceled: %s", from+1, r.CancelReason)
		}
		for _, e := range r.Events {
			rev := e.KV.ModRevision
			if rev > int64(to) {
				return countByResource(revisions), nil
			}
			if _, ok := revisions[rev]; !ok {
				revisions[rev] = resourceOfKey(string(e.KV.Key))
			}
		}
		if len(revisions) == int(to-from) {
			return countByResource(revisions), nil
		}
	}
}

func countByResource(revisions map[int64]string) map[string]int {
	n := map[string]int{}
	for _, r := range revisions {
		n[r]++
	}
	return n
}

// resourceOfKey is the resource an apiserver key belongs to:
// /registry/configmaps/ns/name is "configmaps",
// /registry/apiregistration.k8s.io/apiservices/name is
// "apiregistration.k8s.io/apiservices".
func resourceOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, "/registry/")
	if !ok {
		return key
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) > 1 && strings.Contains(parts[0], ".") {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}
