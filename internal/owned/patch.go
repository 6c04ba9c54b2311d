package owned

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// patch sends body as a JSON patch of the ConfigMap name, once, through
// rc's HTTP client (its TLS, credentials and HTTP/2 connection), and returns
// the new RV. It is the load's one request per write: client-go's request
// builder (the URL and its metrics template built again each time, headers
// cloned, the whole ConfigMap decoded) cost as much of the exporter's CPU
// as the write itself, where only the RV is wanted.
func (s *Store) patch(ctx context.Context, rc *rest.RESTClient, name string, body []byte) (uint64, error) {
	u, ok := s.patchURLs.Load(name)
	if !ok {
		u, _ = s.patchURLs.LoadOrStore(name, rc.Patch(types.JSONPatchType).Namespace(s.ns).Resource("configmaps").Name(name).URL())
	}
	// The URL parsed once (parsing it took a fifth of each write's CPU),
	// copied, as a transport may change its request's.
	to := *u.(*url.URL)
	req := (&http.Request{Method: http.MethodPatch, URL: &to, Host: to.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": patchType, "Accept": acceptJSON},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
	}).WithContext(ctx)
	resp, err := rc.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf := answers.Get().(*bytes.Buffer)
	defer answers.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, 1<<20)); err != nil {
		return 0, err
	}
	b := buf.Bytes()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, responseError(resp, bytes.Clone(b), name)
	}
	if rv, ok := metadataRV(b); ok {
		return ParseRV(rv)
	}
	var obj struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return 0, fmt.Errorf("patch configmap %s/%s: decoding the answer: %w", s.ns, name, err)
	}
	return ParseRV(obj.Metadata.ResourceVersion)
}

// The headers of every patch; never written.
var (
	patchType  = []string{string(types.JSONPatchType)}
	acceptJSON = []string{"application/json"}
)

// answers are the buffers of the patches' answers: the load reads one per
// write.
var answers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// metadataRV finds the object's resourceVersion in the apiserver's JSON
// without decoding the whole object (a tenth of the exporter's CPU at 100
// writes/s went to that): the apiserver writes ObjectMeta's fields in their
// order, resourceVersion before labels and annotations, the only places a
// user's text could hold the key, and every quote inside a string is
// escaped. ok is false when the answer is not written so: the caller decodes it.
func metadataRV(b []byte) (rv string, ok bool) {
	const key = `"resourceVersion":"`
	meta := bytes.Index(b, []byte(`"metadata":{`))
	i := bytes.Index(b, []byte(key))
	if meta < 0 || i < meta {
		return "", false
	}
	for _, other := range []string{`"labels":`, `"annotations":`, `"managedFields":`} {
		if j := bytes.Index(b[meta:i], []byte(other)); j >= 0 {
			return "", false
		}
	}
	v := b[i+len(key):]
	end := bytes.IndexByte(v, '"')
	if end <= 0 {
		return "", false
	}
	return string(v[:end]), true
}

// responseError is the error client-go would give for a failed answer: its
// Status when it sends one, else a generic error of its code, with the delay
// of its Retry-After header either way.
func responseError(resp *http.Response, body []byte, name string) error {
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Status == metav1.StatusFailure {
		if retry > 0 && (st.Details == nil || st.Details.RetryAfterSeconds == 0) {
			if st.Details == nil {
				st.Details = &metav1.StatusDetails{}
			}
			st.Details.RetryAfterSeconds = int32(retry)
		}
		return &apierrors.StatusError{ErrStatus: st}
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodPatch, schema.GroupResource{Resource: "configmaps"}, name,
		strings.TrimSpace(string(body)), retry, true)
}
