package owned

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

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
		u, _ = s.patchURLs.LoadOrStore(name, rc.Patch(types.JSONPatchType).Namespace(s.ns).Resource("configmaps").Name(name).URL().String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, u.(string), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", string(types.JSONPatchType))
	req.Header.Set("Accept", "application/json")
	resp, err := rc.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, responseError(resp, b, name)
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
